import { test } from 'node:test';
import assert from 'node:assert/strict';
import { NOTICE_MAX_AGE_MS, parsePathsNotice } from '../../../cmp/queue/paths-notice.js';
import { sign } from '../../../cmp/queue/signing.js';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef');
const notice = (app: string, at: number, key = KEY, domain = 'cmp-offload/paths-notice/v1') =>
  JSON.stringify({ app, at, sig: sign(key, domain, [app, String(at)]).toString('hex') });

test('a notice signed with our key, fresh, names its app', () => {
  assert.equal(parsePathsNotice(KEY, notice('team_web', 1000), 1000), 'team_web');
  assert.equal(parsePathsNotice(KEY, notice('web', 1000), 1000 + NOTICE_MAX_AGE_MS), 'web');
});

test('unsigned, wrongly signed, re-addressed, stale or malformed notices are refused', () => {
  const other = Buffer.from('another key, another key, 012345');
  assert.equal(parsePathsNotice(KEY, notice('web', 1000, other), 1000), undefined);
  assert.equal(parsePathsNotice(KEY, notice('web', 1000, KEY, 'cmp-offload/cancel/v1'), 1000), undefined);
  assert.equal(parsePathsNotice(KEY, JSON.stringify({ app: 'web', at: 1000 }), 1000), undefined);
  const moved = JSON.parse(notice('web', 1000)) as Record<string, unknown>;
  assert.equal(parsePathsNotice(KEY, JSON.stringify({ ...moved, app: 'victim' }), 1000), undefined);
  assert.equal(parsePathsNotice(KEY, notice('web', 1000), 1001 + NOTICE_MAX_AGE_MS), undefined);
  assert.equal(parsePathsNotice(KEY, notice('', 1000), 1000), undefined);
  for (const raw of ['', 'null', '{', '[]', '{"app":1}']) assert.equal(parsePathsNotice(KEY, raw, 1000), undefined, raw);
});
