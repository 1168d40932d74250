import { before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomFillSync } from 'node:crypto';
import zlib from 'node:zlib';
import { chooseInflater, GoGunzip, GzipError } from '../../../cmp/go/go-gunzip.js';

/** Feeds `input` in `chunk`-byte pushes; returns the output (views into a reused buffer: copied). */
function gunzip(input: Buffer, chunk: number, consume?: (b: Buffer) => void): Buffer {
  const out: Buffer[] = [];
  const g = new GoGunzip(b => {
    consume?.(b);
    out.push(Buffer.from(b));
  });
  try {
    for (let i = 0; i < input.length; i += chunk) g.push(input.subarray(i, i + chunk));
    g.finish();
  } finally {
    g.close();
  }
  return Buffer.concat(out);
}

const text = Buffer.from('apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: example\n'.repeat(40_000));
const random = randomFillSync(Buffer.alloc(300_000));

// Every case on both inflaters: zlib's native handle (the default) and pako (where the handle is missing).
for (const kind of ['native', 'portable'] as const) {
describe(`${kind} inflate`, () => {
  before(() => assert.equal(chooseInflater(kind), kind));

  test('multi-member gzip decodes as zlib does, wherever the pushes split it (member ends on a push boundary too)', () => {
    const a = zlib.gzipSync(text.subarray(0, 5000));
    const b = zlib.gzipSync(random.subarray(0, 3000), { level: 1 });
    const c = zlib.gzipSync(Buffer.alloc(0));
    const input = Buffer.concat([a, b, c]);
    const want = zlib.gunzipSync(input);
    for (const chunk of [1, 7, 512, a.length - 8, a.length, a.length + 3, input.length]) {
      assert.deepEqual(gunzip(input, chunk), want, `pushes of ${chunk} bytes`);
    }
  });

  test('one push whose output spans many output chunks delivers all of it, in order, before it returns', () => {
    const input = Buffer.concat([zlib.gzipSync(text), zlib.gzipSync(random)]);
    let seen = 0;
    const got = gunzip(input, input.length, b => (seen += b.length));
    assert.equal(seen, text.length + random.length);
    assert.deepEqual(got, Buffer.concat([text, random]));
  });

  test('an error thrown by the consumer is thrown by the push that carried the data', () => {
    const input = zlib.gzipSync(text);
    let calls = 0;
    const g = new GoGunzip(() => {
      if (++calls === 2) throw new Error('consumer says no');
    });
    assert.throws(() => g.push(input), { message: 'consumer says no' });
    g.close();
    assert.equal(calls, 2);
  });

  test('corrupt deflate data fails with Go flate text after delivering the output before it', () => {
    // A gzip header, 200 kB of random bytes deflated up to a sync flush (no final block), then a block of
    // the reserved type 3: zlib fails there ("invalid block type").
    const header = Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
    const body = zlib.deflateRawSync(random.subarray(0, 200_000), { finishFlush: zlib.constants.Z_SYNC_FLUSH });
    const bad = Buffer.concat([header, body, Buffer.from([0x07, 0, 0, 0, 0, 0, 0, 0, 0])]);
    let delivered = 0;
    let err: unknown;
    try {
      gunzip(bad, 1024, b => (delivered += b.length));
    } catch (e) {
      err = e;
    }
    assert.ok(err instanceof GzipError);
    assert.match(err.message, /^flate: corrupt input before offset \d+$/);
    assert.equal(err.inFirstHeader, false);
    assert.ok(delivered > 0 && delivered <= 200_000, `delivered ${delivered}`);
  });

  test('a bad CRC or a truncated member is reported with Go gzip texts', () => {
    const good = zlib.gzipSync(text.subarray(0, 10_000));
    const crc = Buffer.from(good);
    crc[crc.length - 6]! ^= 1;
    assert.throws(() => gunzip(crc, 100), { name: 'GzipError', message: 'gzip: invalid checksum' });
    assert.throws(() => gunzip(good.subarray(0, good.length - 3), 100), { name: 'GzipError', message: 'unexpected EOF' });
    assert.throws(() => gunzip(Buffer.alloc(0), 100), { name: 'GzipError', message: 'EOF' });
  });
});
}

/** A preload that makes zlib's streams lack the native handle, as a Node.js release might. */
const NO_HANDLE = `data:text/javascript,${encodeURIComponent(
  "import zlib from 'node:zlib'; Object.defineProperty(zlib.InflateRaw.prototype, '_handle', { get() {}, set() {}, configurable: true });",
)}`;

test('a fresh process picks the native inflater, and pako where the handle is missing (both decode)', () => {
  const module = new URL('../../../cmp/go/go-gunzip.js', import.meta.url).href;
  const script = `const { chooseInflater, GoGunzip } = await import(${JSON.stringify(module)});
    const zlib = (await import('node:zlib')).default;
    let out = ''; const g = new GoGunzip(b => (out += b.toString()));
    g.push(zlib.gzipSync('hello, inflater')); g.finish(); g.close();
    process.stdout.write(chooseInflater() + ' ' + out);`;
  const run = (args: string[]) => execFileSync(process.execPath, [...args, '--input-type=module', '-e', script], { encoding: 'utf8' });
  assert.equal(run([]), 'native hello, inflater');
  assert.equal(run(['--import', NO_HANDLE]), 'portable hello, inflater');
});
