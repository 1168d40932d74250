import { test } from 'node:test';
import assert from 'node:assert/strict';
import { encodeLookup, newLookupId, openAnswer, parseLookup, sealAnswer, LOOKUP_MAX_AGE_MS, type LookupMessage } from '../../../cmp/queue/git-creds-relay.js';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef');
const OTHER_KEY = Buffer.from('fedcba9876543210fedcba9876543210');
const NOW = 1_700_000_000_000;
const m: LookupMessage = { jobId: 'a'.repeat(64), lookupId: newLookupId(), what: 'credentials' };

test('a lookup verifies with its key while fresh; forged, altered, stale or future ones do not', () => {
  const raw = encodeLookup(KEY, m, NOW);
  assert.deepEqual(parseLookup(KEY, raw, NOW + 1_000), m);
  assert.equal(parseLookup(OTHER_KEY, raw, NOW), undefined, 'another key');
  assert.equal(parseLookup(KEY, raw, NOW + LOOKUP_MAX_AGE_MS + 1), undefined, 'too old: a captured lookup is not answered later');
  assert.equal(parseLookup(KEY, raw, NOW - LOOKUP_MAX_AGE_MS - 1), undefined, 'from the future');
  const parsed = JSON.parse(raw) as Record<string, unknown>;
  for (const change of [{ jobId: 'b'.repeat(64) }, { lookupId: newLookupId() }, { what: 'files' }, { at: NOW + 1 }]) {
    assert.equal(parseLookup(KEY, JSON.stringify({ ...parsed, ...change }), NOW), undefined, JSON.stringify(change));
  }
  for (const bad of ['', 'null', '[]', '{"jobId":"x"}', JSON.stringify({ ...parsed, what: 'everything' }), JSON.stringify({ ...parsed, jobId: '../x' })]) {
    assert.equal(parseLookup(KEY, bad, NOW), undefined, bad);
  }
});

test('an answer opens only for its own job, lookup and kind, and never holds the secret in the clear', () => {
  const answer = { ok: true as const, username: 'bot', password: 'p4ssw0rd-xyz' };
  const sealed = sealAnswer(KEY, m, answer);
  assert.ok(!sealed.toString('latin1').includes('p4ssw0rd-xyz'));
  assert.deepEqual(openAnswer(KEY, m, sealed), answer);
  assert.equal(openAnswer(OTHER_KEY, m, sealed), undefined);
  for (const other of [{ ...m, jobId: 'b'.repeat(64) }, { ...m, lookupId: newLookupId() }, { ...m, what: 'files' as const }]) {
    assert.equal(openAnswer(KEY, other, sealed), undefined, JSON.stringify(other));
  }
  const flipped = Buffer.from(sealed);
  flipped[20] = flipped[20]! ^ 1;
  assert.equal(openAnswer(KEY, m, flipped), undefined, 'tampered');
  assert.equal(openAnswer(KEY, m, Buffer.alloc(10)), undefined, 'truncated');
});

test('answers of the wrong shape are refused even when they open', () => {
  assert.equal(openAnswer(KEY, m, sealAnswer(KEY, m, { ok: true, files: [] })), undefined, 'files for a credentials lookup');
  const files: LookupMessage = { ...m, what: 'files' };
  assert.deepEqual(openAnswer(KEY, files, sealAnswer(KEY, files, { ok: true, files: [['/dev/shm/a', 'eA==']] })), { ok: true, files: [['/dev/shm/a', 'eA==']] });
  assert.equal(openAnswer(KEY, files, sealAnswer(KEY, files, { ok: true, username: 'u', password: 'p' })), undefined);
  assert.deepEqual(openAnswer(KEY, m, sealAnswer(KEY, m, { ok: false, code: 5, message: 'unknown nonce' })), { ok: false, code: 5, message: 'unknown nonce' });
});
