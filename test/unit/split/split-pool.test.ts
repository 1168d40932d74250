import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeManifests, manifestsJson, preparedOf, someManifestIncludes } from '../../../cmp/split/prepared.js';
import { ManifestsTooLarge, splitManifests } from '../../../cmp/split/split-manifests.js';
import { INLINE_SPLIT_BYTES, splitPool } from '../../../cmp/split/split-pool.js';
import { ManifestResponse } from '../../../proto/generated/cmpserver/plugin/plugin.js';

// The threads give what the loop would: the same manifests, errors and sizes, plus the encoding.

const yamlStream = (n: number) => Buffer.from(Array.from({ length: n }, (_, i) => `kind: ConfigMap\nmetadata:\n  name: "c-${i} é <&>"\ndata: {n: ${i}, f: 1.50, b: yes}\n`).join('---\n'));

test('a large output split in a thread gives the manifests the loop would, as their ManifestResponse encoding', async () => {
  const buf = yamlStream(2000);
  assert.ok(buf.length > INLINE_SPLIT_BYTES);
  const manifests = splitManifests(buf);
  // The pool takes the buffer over (moved to the thread): it gets a copy here.
  const result = await splitPool.split(Buffer.from(buf), 100 * 1024 * 1024, 100 * 1024 * 1024);
  const prepared = preparedOf(result)!;
  assert.ok(prepared, 'prepared');
  assert.deepEqual(prepared.encoded, Buffer.from(ManifestResponse.encode({ manifests, sourceType: '' }).finish()));
  assert.equal(prepared.bytes, manifests.reduce((n, m) => n + Buffer.byteLength(m), 0));
  assert.equal(prepared.count, manifests.length);
  // Its manifests, for whoever reads them, are decoded from the encoding.
  assert.deepEqual(result, { kind: 'generate', manifests });
  assert.equal(JSON.stringify(result), JSON.stringify({ kind: 'generate', manifests }));
  // Small outputs stay on the loop, as strings.
  const small = await splitPool.split(yamlStream(1), 1024, 1024);
  assert.equal(preparedOf(small), undefined);
  assert.deepEqual(small, { kind: 'generate', manifests: splitManifests(yamlStream(1)) });
});

test("a prepared result's manifests as JSON, decoded, and searched, from their encoding", async () => {
  const manifests = ['{"a":"é \\"x\\" \u2028"}', '', 'x'.repeat(300), '{"b":"revision-1"}', 'ab', 'cd'];
  const encoded = Buffer.from(ManifestResponse.encode({ manifests, sourceType: '' }).finish());
  assert.deepEqual(decodeManifests(encoded), manifests);
  assert.equal(manifestsJson(encoded).toString(), JSON.stringify(manifests));
  assert.equal(manifestsJson(Buffer.alloc(0)).toString(), '[]');
  const json = await splitPool.manifestsJson({ bytes: 0, count: manifests.length, encoded });
  assert.equal(json.toString(), JSON.stringify(manifests));
  for (const v of ['revision-1', 'x'.repeat(300), 'é', 'ab', 'cd', 'bc', 'abcd', 'xx{', '"}\n']) {
    assert.equal(someManifestIncludes(encoded, v), manifests.some(m => m.includes(v)), v);
  }
  // A match across a field's header (its length byte is `{`, 123) is not one.
  const m123 = ['y'.repeat(123), '{z'];
  const e123 = Buffer.from(ManifestResponse.encode({ manifests: ['{q', ...m123], sourceType: '' }).finish());
  assert.equal(someManifestIncludes(e123, '{y'), false);
  assert.equal(someManifestIncludes(e123, '{z'), true);
  assert.equal(someManifestIncludes(e123, '{q'), true);
});

test('errors and the size limit come back from the thread as the loop would throw them', async () => {
  const bad = Buffer.concat([yamlStream(500), Buffer.from('---\na: 1\n  b: 2\n')]);
  const message = 'failed to unmarshal manifest: error converting YAML to JSON: yaml: line 2: mapping values are not allowed in this context';
  assert.throws(() => splitManifests(bad), { message });
  await assert.rejects(splitPool.split(Buffer.from(bad), 1e9, 1e9), { message });
  const buf = yamlStream(2000);
  let inline: ManifestsTooLarge | undefined;
  try {
    splitManifests(buf, 4096);
  } catch (err) {
    inline = err as ManifestsTooLarge;
  }
  await assert.rejects(splitPool.split(Buffer.from(buf), 4096, 1e9), (err: unknown) => err instanceof ManifestsTooLarge && err.messageBytes === inline!.messageBytes && err.maxBytes === 4096);
});

test('a large stored result is parsed in a thread; anything but a result is refused', async () => {
  const manifests = splitManifests(yamlStream(2000));
  const json = Buffer.from(JSON.stringify({ kind: 'generate', manifests }));
  const inline = (b: Buffer) => JSON.parse(b.toString()) as { kind: string };
  const r = (await splitPool.parseResult(json, inline)) as { kind: string; manifests: string[] };
  assert.deepEqual(r, { kind: 'generate', manifests });
  assert.deepEqual(preparedOf(r)!.encoded, Buffer.from(ManifestResponse.encode({ manifests, sourceType: '' }).finish()));
  const params = { kind: 'parameters', parameterAnnouncements: Array.from({ length: 500 }, (_, i) => ({ name: `p${i}`, title: 'x'.repeat(40) })) };
  assert.deepEqual(await splitPool.parseResult(Buffer.from(JSON.stringify(params)), inline), params);
  for (const junk of ['x'.repeat(20_000), JSON.stringify({ kind: 'generate', manifests: [1, ...manifests] }), JSON.stringify(manifests)]) {
    assert.equal(await splitPool.parseResult(Buffer.from(junk), inline), undefined);
  }
});
