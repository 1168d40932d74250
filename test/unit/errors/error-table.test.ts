import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { CmpError, OUR_ERRORS, ourError, wrap } from '../../../cmp/errors.js';
import { REPO_ROOT } from '../../helpers/paths.js';

/** `RESOURCE_EXHAUSTED` → `ResourceExhausted`, as Go prints codes. */
function goCodeName(code: Status): string {
  return Status[code]!.toLowerCase().replace(/(^|_)([a-z])/g, (_m, _u, c: string) => c.toUpperCase());
}

test('the README error table lists every entry of OUR_ERRORS with its status, and nothing else', () => {
  const readme = fs.readFileSync(path.join(REPO_ROOT, 'README.md'), 'utf8');
  const block = /<!-- errors:start -->([\s\S]*)<!-- errors:end -->/.exec(readme)?.[1];
  assert.ok(block, 'README has the errors markers');
  const rows = [...block.matchAll(/^\| `(\w+)` \| (\w+) \|/gm)].map(m => [m[1], m[2]]);
  const table = Object.entries(OUR_ERRORS).map(([id, e]) => [id, goCodeName(e.code)]);
  assert.deepEqual(rows, table);
});

test('ourError builds the text, status and kind of its table entry; wrapping keeps status and kind', () => {
  const err = ourError('queueFull', 'helm', 12, 10);
  assert.equal(err.code, Status.RESOURCE_EXHAUSTED);
  assert.equal(err.message, 'cmp-offload: the queue of plugin helm is full: 12 jobs waiting (limit 10, CMP_OFFLOAD_MAX_QUEUE_DEPTH)');
  assert.equal(err.kind, 'queueFull');
  const wrapped = wrap('outer', wrap('inner', err));
  assert.deepEqual([wrapped.message, wrapped.code, wrapped.kind], [`outer: inner: ${err.message}`, Status.RESOURCE_EXHAUSTED, 'queueFull']);
  assert.equal(wrap('outer', new CmpError('plain')).kind, undefined);
});
