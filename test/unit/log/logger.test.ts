import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { formatGoTime, RFC3339, textLine } from '../../../cmp/log.js';

const LOG_MODULE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../cmp/log.js');

/** What a process logging with createLogger(env) prints on stderr (one record per level). */
function records(env: Record<string, string>): string[] {
  const script = `
    const { createLogger } = await import(${JSON.stringify(LOG_MODULE)});
    const log = createLogger(${JSON.stringify(env)}, 'cmp-offload-test');
    log.debug('d'); log.info({ socket: '/x/y.sock', n: 3 }, 'serving'); log.warn({ why: 'a b' }, 'careful'); log.error('bad "thing"');
    log.flush();`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { env: { ...process.env, TZ: 'UTC' }, stdio: ['ignore', 'ignore', 'pipe'] });
  assert.equal(r.status, 0, r.stderr.toString());
  return r.stderr.toString().split('\n').filter(l => l !== '');
}

test('JSON records are logrus-shaped: string level (warning, not warn), RFC3339 time, msg, fields', () => {
  const lines = records({ ARGOCD_CMP_SERVER_LOGLEVEL: 'debug' }).map(l => JSON.parse(l) as Record<string, unknown>);
  assert.deepEqual(lines.map(l => [l.level, l.msg]), [['debug', 'd'], ['info', 'serving'], ['warning', 'careful'], ['error', 'bad "thing"']]);
  for (const l of lines) assert.match(l.time as string, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  assert.equal(lines[1]!.socket, '/x/y.sock');
  assert.equal(lines[1]!.n, 3);
  assert.equal(lines[1]!.service, 'cmp-offload-test');
});

test('logrus level names are accepted (warning), the level filters', () => {
  const lines = records({ ARGOCD_CMP_SERVER_LOGLEVEL: 'warning' }).map(l => JSON.parse(l) as { level: string });
  assert.deepEqual(lines.map(l => l.level), ['warning', 'error']);
});

test('text records: time="…" level=… msg=… then the fields sorted, quoted as logrus quotes them', () => {
  const lines = records({ ARGOCD_CMP_SERVER_LOGFORMAT: 'text', ARGOCD_LOG_FORMAT_TIMESTAMP: '2006-01-02 15:04:05.000' });
  assert.equal(lines.length, 3);
  assert.match(lines[0]!, /^time="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}" level=info msg=serving n=3 service=cmp-offload-test socket=\/x\/y\.sock$/);
  assert.match(lines[1]!, / level=warning msg=careful service=cmp-offload-test why="a b"$/);
  assert.match(lines[2]!, / level=error msg="bad \\"thing\\"" service=cmp-offload-test$/);
});

test('textLine: logrus order and quoting', () => {
  assert.equal(
    textLine('{"level":"info","time":"2026-01-02T03:04:05Z","b":"x y","a":true,"empty":"","msg":"hi"}'),
    'time="2026-01-02T03:04:05Z" level=info msg=hi a=true b="x y" empty=\n',
  );
});

test('formatGoTime: Go layouts', () => {
  const prev = process.env.TZ;
  process.env.TZ = 'UTC';
  try {
    const d = new Date(Date.UTC(2026, 0, 2, 15, 4, 5, 120));
    assert.equal(formatGoTime(d, RFC3339), '2026-01-02T15:04:05Z');
    assert.equal(formatGoTime(d, '2006-01-02T15:04:05.000Z07:00'), '2026-01-02T15:04:05.120Z');
    assert.equal(formatGoTime(d, '2006-01-02T15:04:05.999999999Z07:00'), '2026-01-02T15:04:05.12Z');
    assert.equal(formatGoTime(d, 'Mon Jan _2 3:04PM MST -0700 002'), 'Fri Jan  2 3:04PM UTC +0000 002');
    assert.equal(formatGoTime(d, 'Monday, 02-January-06 15h'), 'Friday, 02-January-26 15h');
    assert.equal(formatGoTime(new Date(Date.UTC(2026, 0, 2, 15, 4, 5, 0)), '05.999'), '05');
    process.env.TZ = 'Asia/Kolkata';
    assert.equal(formatGoTime(d, RFC3339), '2026-01-02T20:34:05+05:30');
  } finally {
    if (prev === undefined) delete process.env.TZ;
    else process.env.TZ = prev;
  }
});
