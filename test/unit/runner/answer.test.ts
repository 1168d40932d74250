import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeResult, EncodedResult, encodeResult } from '../../../cmp/queue/result-store.js';
import { preparedOf } from '../../../cmp/split/prepared.js';
import { ManifestResponse } from '../../../proto/generated/cmpserver/plugin/plugin.js';
import { checkAnswer, checkDepth, MAX_ANSWER_DEPTH, type AnswerBounds } from '../../../runner/answer.js';
import { AnswerDecoder, decoderHeapMb, INLINE_DECODE_BYTES } from '../../../worker/answer-decoder.js';
import { encodeFrame, FrameReader, FrameType, ProtocolError } from '../../../runner/protocol.js';

const GENERATE: AnswerBounds = { kind: 'generate', readsAsked: false, maxPaths: 10, maxManifests: 100 };
const json = (v: unknown) => Buffer.from(JSON.stringify(v));

test('the depth check counts brackets outside strings only, escaped quotes included', () => {
  checkDepth(Buffer.from('[[["[[[[[[", "\\"[[[[[[[", "\\\\"], {"a": "]]]]"}]]'), 3);
  assert.throws(() => checkDepth(Buffer.from('[[[["\\\\"]]]]'), 3), /nests deeper than 3 levels/);
  assert.throws(() => checkDepth(Buffer.from('[{"a\\"": [{}]}]'), 3), /nests deeper than 3 levels/);
  // Unterminated or malformed text is JSON.parse's to refuse.
  checkDepth(Buffer.from('["[[[[[['), 1);
});

test('the deepest valid answer (parameters: a map in an announcement) passes; one level more is refused before parsing', () => {
  const announcement = { name: 'n', title: '', tooltip: '', required: false, itemType: '', collectionType: 'map', string: '', array: ['a'], map: { k: 'v' } };
  const answer = { v: 1, ok: true, result: { kind: 'parameters', parameterAnnouncements: [announcement] } };
  const bounds: AnswerBounds = { ...GENERATE, kind: 'parameters' };
  assert.deepEqual(checkAnswer(json(answer), bounds), { ok: true, result: answer.result, reads: undefined, stages: [], spans: [] });
  const deeper = { ...answer, result: { ...answer.result, parameterAnnouncements: [{ ...announcement, map: { k: 'v' }, x: [[1]] }] } };
  assert.throws(() => checkAnswer(json(deeper), bounds), new RegExp(`nests deeper than ${MAX_ANSWER_DEPTH} levels`));
});

test('manifests: at most one per byte the command may print, none empty', () => {
  const ok = (manifests: string[]) => json({ v: 1, ok: true, result: { kind: 'generate', manifests } });
  assert.equal(checkAnswer(ok(Array(100).fill('1')), GENERATE).ok, true);
  assert.throws(() => checkAnswer(ok(Array(101).fill('1')), GENERATE), /more manifests \(101\) than the command's output may hold \(100, CMP_OFFLOAD_MAX_OUTPUT_BYTES\)/);
  assert.throws(() => checkAnswer(ok(['{}', '']), GENERATE), /an empty manifest/);
});

test('frames come out whole whatever the chunking: sliced within a chunk, copied into their own memory across chunks', () => {
  const frames = Buffer.concat([encodeFrame(FrameType.ANSWER, 'first'), encodeFrame(FrameType.ANSWER, ''), encodeFrame(FrameType.ANSWER, 'x'.repeat(1000))]);
  for (const size of [1, 3, 5, 7, 64, frames.length]) {
    const reader = new FrameReader(() => 2000);
    const got: string[] = [];
    for (let at = 0; at < frames.length; at += size) {
      reader.push(frames.subarray(at, at + size));
      for (let f; (f = reader.next()); ) got.push(f.payload.toString());
    }
    assert.deepEqual(got, ['first', '', 'x'.repeat(1000)], `chunks of ${size}`);
    assert.equal(reader.pending(), 0);
  }
  const reader = new FrameReader(() => 2000);
  reader.push(encodeFrame(FrameType.ANSWER, 'x'.repeat(1000)).subarray(0, 10));
  assert.equal(reader.pending(), 10);
  assert.equal(reader.next(), undefined);
  const small = new FrameReader(() => 10);
  small.push(encodeFrame(FrameType.ANSWER, 'x'.repeat(11)).subarray(0, 5));
  assert.throws(() => small.next(), ProtocolError);
});

test('the decoder thread: a result comes back as the encoding the store would have written, refusals as ProtocolError', async () => {
  const decoder = new AnswerDecoder(decoderHeapMb(1024 * 1024));
  const result = { kind: 'generate' as const, manifests: ['{"a":"é\\"x"}', '{"b":2}'] };
  const a = await decoder.decode(json({ v: 1, ok: true, result, stages: { exec: 5 } }), GENERATE);
  assert.ok(a.ok);
  assert.deepEqual(a.stages, [['exec', 5]]);
  assert.deepEqual(preparedOf(a.result)!.encoded, Buffer.from(ManifestResponse.encode({ ...result, sourceType: '' }).finish()));
  assert.equal(preparedOf(a.result)!.bytes, Buffer.byteLength(result.manifests.join('')));
  assert.deepEqual(a.result, result);
  const match = { kind: 'match' as const, isSupported: true, isDiscoveryEnabled: false };
  const m = await decoder.decode(json({ v: 1, ok: true, result: match, stages: {} }), { ...GENERATE, kind: 'match' });
  assert.ok(m.ok && m.result instanceof EncodedResult);
  assert.equal(m.result.json.toString(), JSON.stringify(match));
  const stored = await encodeResult(Buffer.alloc(32), 'k', 'req', a.result);
  assert.deepEqual(stored, await encodeResult(Buffer.alloc(32), 'k', 'req', result));
  assert.deepEqual(await decodeResult(Buffer.alloc(32), 'k', 'req', stored), result);
  // A slice of a larger buffer (a frame within one chunk) is copied, not transferred from under its owner.
  const chunk = Buffer.concat([Buffer.from('xx'), json({ v: 1, ok: false, code: 3, message: 'no' })]);
  assert.deepEqual(await decoder.decode(chunk.subarray(2), GENERATE), { ok: false, code: 3, message: 'no', stages: [], spans: [] });
  assert.equal(chunk.subarray(0, 2).toString(), 'xx');
  await assert.rejects(decoder.decode(Buffer.from('LIE-TEXT {'), GENERATE), (err: Error) => err instanceof ProtocolError && err.message === 'the answer is not JSON');
  await assert.rejects(decoder.decode(Buffer.from('['.repeat(1e6)), GENERATE), /nests deeper than 5 levels/);
});

test('a small answer is decoded on the loop, a larger one in the thread: the same checks, the same result bytes', async () => {
  const decoder = new AnswerDecoder(decoderHeapMb(1024 * 1024));
  const bounds = { ...GENERATE, maxManifests: 1e6 };
  for (const size of [10, INLINE_DECODE_BYTES, INLINE_DECODE_BYTES + 1, 4 * INLINE_DECODE_BYTES]) {
    const result = { kind: 'generate' as const, manifests: [`{"a":"${'x'.repeat(size)}"}`] };
    const a = await decoder.decode(json({ v: 1, ok: true, result, stages: { exec: 1 } }), bounds);
    assert.ok(a.ok);
    assert.deepEqual(preparedOf(a.result)!.encoded, Buffer.from(ManifestResponse.encode({ ...result, sourceType: '' }).finish()));
    await assert.rejects(decoder.decode(json({ v: 1, ok: true, result: { kind: 'match' }, pad: 'x'.repeat(size) }), bounds), ProtocolError);
  }
});

test('an answer that needs more than the decoder heap ends the thread, not the process, and the next one is decoded', async () => {
  const decoder = new AnswerDecoder(16);
  // 100k small objects, each with a key of its own: far more heap than their 1.5 MiB of text.
  const objects = Buffer.from(`{"v":1,"ok":true,"stages":{"exec":1},"x":[${Array.from({ length: 1e5 }, (_, i) => `{"k${i}":${i}}`).join(',')}]}`);
  await assert.rejects(decoder.decode(objects, GENERATE), /the answer could not be decoded within the decoder's 16 MiB heap$/);
  const a = await decoder.decode(json({ v: 1, ok: false, code: 2, message: 'fine' }), GENERATE);
  assert.deepEqual(a, { ok: false, code: 2, message: 'fine', stages: [], spans: [] });
});

test('a decoder thread started but never used does not keep the process alive (a stopping worker exits)', async () => {
  // A worker warms the thread for every job; when none got an answer (runner lost, cancelled)
  // nothing else unrefs it. A process that only warms one must end by itself.
  // A script file, not -e: the thread inherits the process's flags, and --input-type would break it.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-decoder-'));
  const script = path.join(dir, 'warm.mjs');
  const url = new URL('../../../worker/answer-decoder.js', import.meta.url).href;
  fs.writeFileSync(script, `import { AnswerDecoder } from ${JSON.stringify(url)};\nnew AnswerDecoder(64).warm();\n`);
  const child = spawn(process.execPath, [script], { stdio: ['ignore', 'ignore', 'inherit'] });
  const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>(resolve => child.once('exit', (c, s) => resolve([c, s])));
  clearTimeout(timer);
  fs.rmSync(dir, { recursive: true, force: true });
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, 'the process did not exit by itself (SIGKILLed after 15 s)');
});

test("the runner's stage spans (tracing) pass through checked: a short list of known stages with times and short names, else refused", () => {
  const ok = { v: 1, ok: false, code: 2, message: 'x', spans: [['extract', 1, 2, '', ''], ['exec', 2, 3, 'sh', 'init']] };
  assert.deepEqual(checkAnswer(json(ok), GENERATE).spans, ok.spans);
  for (const spans of [
    {},
    [['nope', 1, 2, '', '']],
    [['exec', -1, 2, '', '']],
    [['exec', 1, 2, 'x'.repeat(129), '']],
    [['exec', 1, 2, '']],
    Array.from({ length: 17 }, () => ['exec', 1, 2, '', '']),
  ]) {
    assert.throws(() => checkAnswer(json({ ...ok, spans }), GENERATE), /spans/, JSON.stringify(spans).slice(0, 60));
  }
});
