import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { AppStreamRequest, ManifestResponse } from '../../proto/generated/cmpserver/plugin/plugin.js';
import { chunksOf, openCmpClient, repoMetadata } from '../helpers/grpc-client.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { startProxy, type ProxyProcess } from '../helpers/proxy-process.js';
import { freePort } from '../helpers/redis-server.js';
import { tarballOf } from '../helpers/repo.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { generateCall, lines, until, untilHttpListening } from '../integration/distributed-helpers.js';
import { MODES, startCmp } from './harness.js';

/**
 * docs/configuration.md rows, each through the real env (or flags) of a real `cmp-offload
 * proxy` process: ARGOCD_EXEC_TIMEOUT=0, ARGOCD_GRPC_MAX_SIZE_MB on the server side, the log
 * format and level (flags and env), CMP_OFFLOAD_CONCURRENCY and CMP_OFFLOAD_HTTP_ADDR=off.
 */

const markerDirs: string[] = [];
after(() => markerDirs.forEach(d => fs.rmSync(d, { recursive: true, force: true })));
/** A fresh marker dir for one test's plugin runs (MARKERS). */
function markerDir(): string {
  const dir = pluginWritableTempDir('cmp-settings-');
  markerDirs.push(dir);
  return dir;
}

/**
 * A plugin run appends `start TAG` to $MARKERS/log, holds until the test creates
 * $MARKERS/release-TAG, appends `end TAG` and prints a ConfigMap named TAG. The log's order is
 * the order the runs began and ended (small appends are atomic).
 */
const HOLD_PLUGIN = pluginYaml('hold', `generate:
  command: [sh, -c]
  args:
    - |
      echo "start $ARGOCD_ENV_TAG" >> "$MARKERS/log"
      while [ ! -e "$MARKERS/release-$ARGOCD_ENV_TAG" ]; do sleep 0.05; done
      echo "end $ARGOCD_ENV_TAG" >> "$MARKERS/log"
      printf 'kind: ConfigMap\\nmetadata:\\n  name: %s\\n' "$ARGOCD_ENV_TAG"`);

const logOf = (markers: string) => lines(path.join(markers, 'log'));
const started = (markers: string, tag: string) => logOf(markers).includes(`start ${tag}`);
const release = (markers: string, tag: string) => fs.writeFileSync(path.join(markers, `release-${tag}`), '');
const configMap = (name: string) => `{"kind":"ConfigMap","metadata":{"name":"${name}"}}`;

/** Settle-tracking wrapper: whether a promise has settled yet. */
function tracked<T>(p: Promise<T>): { promise: Promise<T>; settled: () => boolean } {
  let done = false;
  p.then(() => (done = true), () => (done = true));
  return { promise: p, settled: () => done };
}

describe('ARGOCD_EXEC_TIMEOUT=0 disables the exec timeout', () => {
  for (const mode of MODES) {
    test(`a command held past a short timeout completes with 0 (${mode})`, async () => {
      const markers = markerDir();
      const server = await startCmp(mode, {
        pluginYaml: HOLD_PLUGIN,
        socketName: 'hold.sock',
        workers: 1,
        env: { MARKERS: markers, ARGOCD_EXEC_TIMEOUT: '0', ARGOCD_EXEC_FATAL_TIMEOUT: '500ms', CMP_OFFLOAD_CACHE: 'off' },
      });
      const client = openCmpClient(server.socketPath);
      try {
        const tag = `zero-${mode}`;
        const tgz = await tarballOf({ 'f.txt': tag });
        const begun = Date.now();
        const call = tracked(client.generate(generateCall(tgz, { TAG: tag }, { timeoutMs: 60_000 })));
        await until(() => started(markers, tag) || call.settled(), 30_000, 'the command to start');
        if (!started(markers, tag)) assert.fail(`the command never started: ${JSON.stringify(await call.promise)}`);
        // Hold it well past the contrasting server's 1s timeout + 500ms fatal timeout (below):
        // the duration is what is under test here, not a stand-in for an event.
        await new Promise(r => setTimeout(r, 3_000));
        if (call.settled()) assert.fail(`the call ended while its command was held: ${JSON.stringify(await call.promise)}`);
        release(markers, tag);
        assert.deepEqual(await call.promise, { value: { manifests: [configMap(tag)], sourceType: '' } });
        assert.ok(Date.now() - begun >= 3_000);
        assert.ok(logOf(markers).includes(`end ${tag}`), 'the command ran to its end');
      } finally {
        client.close();
        await server.stop();
      }
    });
  }

  // The contrast: the same held command under a short timeout is killed, so the test above
  // shows 0 is special rather than timeouts not being applied (distributed mode: timeouts.test.ts).
  test('the same command under ARGOCD_EXEC_TIMEOUT=1s is killed with Argo\'s timeout text (standalone)', async () => {
    const markers = markerDir();
    const proxy = await startProxy({
      pluginYaml: HOLD_PLUGIN,
      socketName: 'hold.sock',
      env: { MARKERS: markers, ARGOCD_EXEC_TIMEOUT: '1s', ARGOCD_EXEC_FATAL_TIMEOUT: '500ms', CMP_OFFLOAD_CACHE: 'off' },
    });
    const client = openCmpClient(proxy.socketPath);
    try {
      const tag = 'short-standalone';
      const tgz = await tarballOf({ 'f.txt': tag });
      // Never released: only the server's timeout can end it before the 60 s deadline.
      const res = await client.generate(generateCall(tgz, { TAG: tag }, { timeoutMs: 60_000 }));
      assert.ok(started(markers, tag), 'the command started');
      assert.ok('code' in res, JSON.stringify(res));
      assert.equal(res.code, Status.UNKNOWN);
      assert.match(res.details, /^error generating manifests: `sh -c ".*"` failed timeout after 1s$/s);
      assert.ok(!logOf(markers).includes(`end ${tag}`));
    } finally {
      client.close();
      await proxy.stop();
    }
  });
});

describe('ARGOCD_GRPC_MAX_SIZE_MB limits the proxy\'s own messages, both directions', () => {
  const MiB = 1024 * 1024;
  // Prints one ConfigMap whose value is SIZE x's (default 10).
  const BIG_PLUGIN = pluginYaml('big', `generate:
  command: [sh, -c]
  args:
    - |
      printf 'kind: ConfigMap\\nmetadata:\\n  name: big\\ndata:\\n  v: '
      head -c "\${ARGOCD_ENV_SIZE:-10}" /dev/zero | tr '\\0' x
      echo`);
  const bigManifest = (n: number) => `{"data":{"v":"${'x'.repeat(n)}"},"kind":"ConfigMap","metadata":{"name":"big"}}`;
  let proxy: ProxyProcess;

  for (const mode of MODES) {
    test(`a response over 1 MiB is refused with RESOURCE_EXHAUSTED, one under it is sent (${mode})`, async () => {
      // The stdout cap defaults to the message limit; raise it so that the response size is what trips.
      const server = await startCmp(mode, {
        pluginYaml: BIG_PLUGIN,
        socketName: 'big.sock',
        workers: 1,
        env: { ARGOCD_GRPC_MAX_SIZE_MB: '1', CMP_OFFLOAD_MAX_OUTPUT_BYTES: '8Mi', CMP_OFFLOAD_CACHE: 'off' },
      });
      // The client accepts far more, so any size refusal seen here is the server's.
      const client = openCmpClient(server.socketPath, { maxMessageBytes: 16 * MiB });
      try {
        const tgz = await tarballOf({ 'f.txt': 'big' });
        const under = MiB - 4096;
        const ok = await client.generate(generateCall(tgz, { SIZE: String(under) }, { timeoutMs: 60_000 }));
        assert.ok('value' in ok, JSON.stringify(ok).slice(0, 300));
        assert.deepEqual(ok.value.manifests, [bigManifest(under)]);

        const over = MiB + 4096;
        // grpc-js's text, counting the framed message (5-byte gRPC prefix + protobuf bytes); grpc-go
        // says `grpc: trying to send message larger than max (N vs. M)` with the protobuf bytes.
        const sent = 5 + ManifestResponse.encode({ manifests: [bigManifest(over)], sourceType: '' }).finish().length;
        const res = await client.generate(generateCall(tgz, { SIZE: String(over) }, { timeoutMs: 60_000 }));
        assert.ok('code' in res, `an over-limit response was sent (${JSON.stringify(res).length} bytes)`);
        assert.equal(res.code, Status.RESOURCE_EXHAUSTED);
        assert.equal(res.details, `Sent message larger than max (${sent} vs. ${MiB})`);
      } finally {
        client.close();
        await server.stop();
      }
    });
  }

  test('a received message over 1 MiB is refused with RESOURCE_EXHAUSTED, one under it accepted (standalone)', async () => {
    proxy = await startProxy({ pluginYaml: BIG_PLUGIN, socketName: 'big.sock', env: { ARGOCD_GRPC_MAX_SIZE_MB: '1', CMP_OFFLOAD_CACHE: 'off' } });
    const client = openCmpClient(proxy.socketPath, { maxMessageBytes: 16 * MiB });
    try {
      // Random base64 compresses to about 3/4: tarballs just under and over the limit, each sent as ONE chunk message.
      const fits = await tarballOf({ 'r.txt': randomBytes(Math.floor(0.9 * MiB)).toString('base64') });
      assert.ok(fits.length < MiB - 1024 && fits.length > MiB / 2, `tarball of ${fits.length} bytes`);
      const ok = await client.generate({ metadata: repoMetadata(fits), chunks: [fits], timeoutMs: 60_000 });
      assert.deepEqual(ok, { value: { manifests: [bigManifest(10)], sourceType: '' } });

      const tooBig = await tarballOf({ 'r.txt': randomBytes(Math.floor(1.1 * MiB)).toString('base64') });
      const message = AppStreamRequest.encode({ file: { chunk: tooBig } }).finish().length;
      assert.ok(message > MiB);
      const res = await client.generate({ metadata: repoMetadata(tooBig), chunks: [tooBig], timeoutMs: 60_000 });
      assert.ok('code' in res, 'an over-limit message was accepted');
      assert.equal(res.code, Status.RESOURCE_EXHAUSTED);
      // grpc-js's text (no dot after `vs`, protobuf bytes). grpc-go's server says `grpc: received
      // message larger than max (N vs. M)`: a difference of texts, not of code (see the report of issue 18).
      assert.equal(res.details, `Received message larger than max (${message} vs ${MiB})`);
      // The same tarball in chunks under the limit is fine: only single messages are limited.
      const chunked = await client.generate({ metadata: repoMetadata(tooBig), chunks: chunksOf(tooBig, 256 * 1024), timeoutMs: 60_000 });
      assert.deepEqual(chunked, { value: { manifests: [bigManifest(10)], sourceType: '' } });
    } finally {
      client.close();
      await proxy.stop();
    }
  });
});

describe('log format and level: --logformat/--loglevel and ARGOCD_CMP_SERVER_LOGFORMAT/_LOGLEVEL', () => {
  const LOGS_PLUGIN = pluginYaml('logs', 'generate:\n  command: [sh, -c, "true"]');
  const records = (stderr: string) => stderr.split('\n').filter(l => l.trim() !== '');
  const json = (stderr: string) => records(stderr).map(l => JSON.parse(l) as { level: string; time: string; msg: string });
  /** logrus's levels in order: `below(l, 'warning')` holds for the records a warning threshold hides. */
  const ORDER = ['trace', 'debug', 'info', 'warning', 'error', 'fatal'];
  const below = (l: { level: string }, level: string) => ORDER.indexOf(l.level) < ORDER.indexOf(level);
  /** logrus's TextFormatter without a terminal: `time="<RFC3339>" level=info msg=…`. */
  const TEXT_LINE = /^time="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)" level=(debug|info|warning|error) msg=/;
  const RFC3339_SECONDS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)$/;
  const NO_HTTP = 'cannot listen for /healthz';

  /**
   * A standalone proxy whose HTTP port is taken: it logs `serving` and, at stop, `shutting down`
   * and `stopped` (info), and the listen failure (error). Waited for the error record, stopped,
   * and its whole stderr returned once the pipe closed (everything written).
   */
  async function standaloneLogs(env: Record<string, string>, args: string[] = []): Promise<string> {
    const holder = net.createServer();
    await new Promise<void>(resolve => holder.listen(0, '127.0.0.1', resolve));
    const port = (holder.address() as net.AddressInfo).port;
    try {
      const proxy = await startProxy({
        pluginYaml: LOGS_PLUGIN,
        socketName: 'logs.sock',
        args,
        env: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${port}`, ARGOCD_CMP_SERVER_LOGLEVEL: '', ARGOCD_CMP_SERVER_LOGFORMAT: '', ARGOCD_LOG_FORMAT_TIMESTAMP: '', ...env },
      });
      const closed = once(proxy.proc, 'close');
      await until(() => proxy.stderr().includes(NO_HTTP), 10_000, 'the listen failure record');
      assert.equal(await proxy.stop(), 0);
      await closed;
      return proxy.stderr();
    } finally {
      holder.close();
    }
  }

  /**
   * A distributed-mode proxy whose Redis is not there: `redis connection error` (debug) from the
   * first connection attempt on, then `Redis is not reachable yet…` (warn) after
   * CMP_OFFLOAD_REDIS_TIMEOUT, then `serving`. Resolves once `until_` holds for its stderr; the
   * proxy is then killed (its shutdown is ops.test.ts's concern).
   */
  async function deadRedisLogs(env: Record<string, string>, args: string[], until_: (stderr: string) => boolean): Promise<string> {
    const proxy = await startProxy({
      pluginYaml: LOGS_PLUGIN,
      socketName: 'logs.sock',
      args,
      env: {
        CMP_OFFLOAD_REDIS_URL: `redis://127.0.0.1:${await freePort()}`,
        CMP_OFFLOAD_SIGNING_KEY: 'settings-test-key-0123456789',
        CMP_OFFLOAD_REDIS_TIMEOUT: '300ms',
        CMP_OFFLOAD_HTTP_ADDR: 'off',
        ARGOCD_CMP_SERVER_LOGLEVEL: '',
        ARGOCD_CMP_SERVER_LOGFORMAT: '',
        ...env,
      },
    });
    try {
      await until(() => until_(proxy.stderr()), 10_000, 'the expected records').catch((err: Error) => {
        throw new Error(`${err.message}; stderr:\n${proxy.stderr()}`);
      });
      return proxy.stderr();
    } finally {
      proxy.proc.kill('SIGKILL');
      await proxy.stop();
    }
  }
  const WARN_MSG = 'Redis is not reachable yet; requests fail with UNAVAILABLE until it is';

  test('neither set: JSON lines at info (info and error shown), logrus-shaped: string level, RFC3339 time, msg', async () => {
    const logs = json(await standaloneLogs({}));
    for (const l of logs) {
      assert.ok(ORDER.includes(l.level), `level ${JSON.stringify(l.level)}`);
      assert.match(l.time, RFC3339_SECONDS);
      assert.equal(typeof l.msg, 'string');
    }
    assert.deepEqual(logs.filter(l => l.level === 'info' && ['serving', 'shutting down', 'stopped'].includes(l.msg)).map(l => l.msg), ['serving', 'shutting down', 'stopped']);
    assert.ok(logs.some(l => l.level === 'error' && l.msg.startsWith(NO_HTTP)));
  });

  test('neither set: debug records hidden (none before the warn that follows them)', async () => {
    const stderr = await deadRedisLogs({}, [], s => s.includes(WARN_MSG));
    const logs = json(stderr);
    assert.deepEqual(logs.filter(l => below(l, 'info')).map(l => l.msg), []);
    // The warn record is logrus's `warning`.
    assert.ok(logs.some(l => l.level === 'warning' && l.msg === WARN_MSG), stderr);
  });

  test('env ARGOCD_CMP_SERVER_LOGLEVEL=warn: info records hidden, error shown', async () => {
    const logs = json(await standaloneLogs({ ARGOCD_CMP_SERVER_LOGLEVEL: 'warn' }));
    assert.ok(logs.some(l => l.level === 'error' && l.msg.startsWith(NO_HTTP)));
    assert.deepEqual(logs.filter(l => below(l, 'warning')).map(l => l.msg), [], 'records below warn');
  });

  test('env ARGOCD_CMP_SERVER_LOGFORMAT=text: plain text lines, none of them JSON', async () => {
    const all = records(await standaloneLogs({ ARGOCD_CMP_SERVER_LOGFORMAT: 'text' }));
    assert.ok(all.length >= 4, all.join('\n'));
    for (const l of all) {
      assert.match(l, TEXT_LINE);
      assert.throws(() => JSON.parse(l), SyntaxError);
    }
    assert.ok(all.some(l => / level=info msg=serving [^\n]*socket=\/\S+\.sock/.test(l)), all.join('\n'));
    assert.ok(all.some(l => l.includes(` level=error msg="${NO_HTTP}`)), all.join('\n'));
  });

  test('env ARGOCD_CMP_SERVER_LOGLEVEL=debug: debug records shown', async () => {
    const stderr = await deadRedisLogs({ ARGOCD_CMP_SERVER_LOGLEVEL: 'debug' }, [], s => s.includes(WARN_MSG) && s.includes('"level":"debug"'));
    assert.ok(json(stderr).some(l => l.level === 'debug' && l.msg === 'redis connection error'));
  });

  test('flags alone: --logformat text --loglevel debug', async () => {
    const stderr = await deadRedisLogs({}, ['--logformat', 'text', '--loglevel', 'debug'], s => / level=debug msg="redis connection error" [^\n]*err=/.test(s));
    for (const l of records(stderr)) assert.match(l, TEXT_LINE);
  });

  test('flags win over the env: --logformat json --loglevel warn over ARGOCD_CMP_SERVER_LOGFORMAT=text, _LOGLEVEL=debug', async () => {
    const logs = json(await standaloneLogs({ ARGOCD_CMP_SERVER_LOGFORMAT: 'text', ARGOCD_CMP_SERVER_LOGLEVEL: 'debug' }, ['--logformat', 'json', '--loglevel', 'warn']));
    assert.ok(logs.some(l => l.level === 'error' && l.msg.startsWith(NO_HTTP)));
    assert.deepEqual(logs.filter(l => below(l, 'warning')).map(l => l.msg), [], 'records below warn');
  });

  test('ARGOCD_LOG_FORMAT_TIMESTAMP: the Go layout of `time`, in JSON and text', async () => {
    // RFC3339 with milliseconds (Argo users set `log.format.timestamp` in argocd-cmd-params-cm).
    const MILLIS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)$/;
    const logs = json(await standaloneLogs({ ARGOCD_LOG_FORMAT_TIMESTAMP: '2006-01-02T15:04:05.000Z07:00' }));
    assert.ok(logs.length >= 4);
    for (const l of logs) assert.match(l.time, MILLIS);
    const text = records(await standaloneLogs({ ARGOCD_CMP_SERVER_LOGFORMAT: 'text', ARGOCD_LOG_FORMAT_TIMESTAMP: '02/01/2006 15:04' }));
    for (const l of text) assert.match(l, /^time="\d\d\/\d\d\/\d{4} \d\d:\d\d" level=/);
  });
});

describe('CMP_OFFLOAD_CONCURRENCY (standalone)', () => {
  test('N runs at once, the next waits for a slot and then completes within its deadline', async () => {
    // N must differ from the default (the CPU count), or a proxy ignoring the setting would pass.
    const n = os.availableParallelism() === 2 ? 3 : 2;
    const markers = markerDir();
    const port = await freePort();
    const proxy = await startProxy({
      pluginYaml: HOLD_PLUGIN,
      socketName: 'hold.sock',
      env: { MARKERS: markers, CMP_OFFLOAD_CONCURRENCY: String(n), CMP_OFFLOAD_CACHE: 'off', CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${port}`, ARGOCD_CMP_SERVER_LOGLEVEL: 'info' },
    });
    const client = openCmpClient(proxy.socketPath);
    const tags = Array.from({ length: n + 1 }, (_, i) => `conc-${i}`);
    try {
      await untilHttpListening(proxy, 'the HTTP server');
      const gauge = async (name: string) => {
        const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
        return Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
      };
      const tgz = await tarballOf({ 'f.txt': 'concurrency' });
      const calls = tags.map(tag => tracked(client.generate(generateCall(tgz, { TAG: tag }, { timeoutMs: 60_000 }))));
      // All N+1 requests are in the proxy and N of them run.
      await until(
        async () => logOf(markers).length >= n && (await gauge('cmp_offload_inflight_requests')) === n + 1,
        30_000,
        `${n} runs to start with ${n + 1} requests in flight`,
      );
      // Give a wrongly started extra run a moment to show in the log (nothing is released yet,
      // so any start beyond N is a breach whenever it happens).
      await new Promise(r => setTimeout(r, 1_000));
      assert.equal(await gauge('cmp_offload_concurrency_in_use'), n);
      const first = logOf(markers);
      assert.equal(first.length, n, `runs started with none released: ${first.join(', ')}`);
      const waiting = tags.find(t => !first.includes(`start ${t}`))!;
      assert.ok(calls.every(c => !c.settled()), 'no call ended while every run was held');

      // One run ends: the waiting request gets its slot.
      const freed = first[0]!.slice('start '.length);
      release(markers, freed);
      await until(() => started(markers, waiting), 30_000, 'the waiting request to run');
      for (const t of tags) release(markers, t);
      const results = await Promise.all(calls.map(c => c.promise));
      assert.deepEqual(results, tags.map(t => ({ value: { manifests: [configMap(t)], sourceType: '' } })));

      // From the log: never more than N between starts and ends, and the waiting one began only after an end.
      let running = 0;
      let most = 0;
      for (const l of logOf(markers)) {
        running += l.startsWith('start ') ? 1 : -1;
        most = Math.max(most, running);
      }
      assert.equal(most, n, logOf(markers).join(', '));
      const log = logOf(markers);
      assert.ok(log.indexOf(`start ${waiting}`) > log.indexOf(`end ${freed}`), log.join(', '));
    } finally {
      for (const t of tags) release(markers, t);
      client.close();
      await proxy.stop();
    }
  });
});

describe('CMP_OFFLOAD_HTTP_ADDR=off', () => {
  /** TCP ports the process `pid` itself listens on (its socket fds matched in /proc/<pid>/net/tcp{,6}). */
  function tcpSockets(pid: number): { port: number; listening: boolean }[] {
    const inodes = new Set<string>();
    for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
      let target: string;
      try {
        target = fs.readlinkSync(`/proc/${pid}/fd/${fd}`, 'utf8');
      } catch (err) {
        // Closed between the listing and the read (the proxy's own files come and go).
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
        throw err;
      }
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (m) inodes.add(m[1]!);
    }
    const out: { port: number; listening: boolean }[] = [];
    for (const table of ['tcp', 'tcp6']) {
      for (const row of fs.readFileSync(`/proc/${pid}/net/${table}`, 'utf8').split('\n').slice(1)) {
        const f = row.trim().split(/\s+/);
        if (f.length < 10 || !inodes.has(f[9]!)) continue;
        out.push({ port: parseInt(f[1]!.split(':')[1]!, 16), listening: f[3] === '0A' });
      }
    }
    return out;
  }

  test('opens no TCP socket, while a proxy given a port listens on it', async () => {
    const port = await freePort();
    // Started together: by the time the one with a port listens, the other would have too.
    const [off, on] = await Promise.all([
      startProxy({ pluginYaml: HOLD_PLUGIN, socketName: 'hold.sock', env: { CMP_OFFLOAD_HTTP_ADDR: 'off', ARGOCD_CMP_SERVER_LOGLEVEL: 'info' } }),
      startProxy({ pluginYaml: HOLD_PLUGIN, socketName: 'hold.sock', env: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${port}`, ARGOCD_CMP_SERVER_LOGLEVEL: 'info' } }),
    ]);
    try {
      await untilHttpListening(on, 'the HTTP server');
      assert.deepEqual(tcpSockets(on.proc.pid!).filter(s => s.listening), [{ port, listening: true }]);
      assert.equal((await fetch(`http://127.0.0.1:${port}/healthz`)).status, 200);
      // Both served their socket and logged `serving`; the proxy with `off` has no TCP socket at
      // all, now or in the next 2 s (the HTTP server starts in the background).
      await until(() => off.stderr().includes('"serving"'), 10_000, 'the proxy to serve');
      const end = Date.now() + 2_000;
      while (Date.now() < end) {
        assert.deepEqual(tcpSockets(off.proc.pid!), []);
        await new Promise(r => setTimeout(r, 100));
      }
      assert.ok(!off.stderr().includes('http listening'), off.stderr());
    } finally {
      await Promise.all([off.stop(), on.stop()]);
    }
  });
});
