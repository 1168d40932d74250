import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { after, afterEach, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status, type ClientWritableStream, type ServiceError } from '@grpc/grpc-js';
import type { AppStreamRequest, ManifestRequestMetadata } from '../../proto/generated/cmpserver/plugin/plugin.js';
import {
  chunksOf,
  fileMessage,
  metadataMessage,
  openCmpClient,
  repoMetadata,
  type CmpTestClient,
  type RpcOutcome,
  type StreamCall,
} from '../helpers/grpc-client.js';
import { fixturePath } from '../helpers/paths.js';
import { buildTar, buildTgz, gzipBytes, headerBlock } from '../helpers/tar-builder.js';
import { eventually, leftovers, MODES, startCmp, type CmpServer } from './harness.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { assertOurError } from '../helpers/our-errors.js';

/**
 * The stream protocol of the three client-streaming RPCs (docs/argo-contract.md#the-repo-stream with the prefixes of
 * each RPC), our answer-after-half-close difference (docs/argo-contract.md#deliberate-differences) and the ingest and
 * extraction limits (same list), against the real `cmp-offload proxy` on its real unix socket.
 */

const LIST_TREE = [process.execPath, fixturePath('e2e', 'list-tree.mjs')];

const RPCS = [
  { name: 'GenerateManifest', method: 'generate', raw: 'generateManifest', prefix: 'generate manifest error receiving stream' },
  { name: 'MatchRepository', method: 'match', raw: 'matchRepository', prefix: 'match repository error receiving stream' },
  {
    name: 'GetParametersAnnouncement',
    method: 'params',
    raw: 'getParametersAnnouncement',
    prefix: 'parameters announcement error receiving stream',
  },
] as const;
type Rpc = (typeof RPCS)[number];

const KiB = 1024;
const MiB = 1024 * KiB;

function call(client: CmpTestClient, rpc: Rpc, c: StreamCall): Promise<RpcOutcome<unknown>> {
  return client[rpc.method](c);
}

function assertStatus(outcome: RpcOutcome<unknown>, code: Status, details: string): void {
  assert.deepEqual(outcome, { code, details }, `expected ${Status[code]} "${details}"`);
}

function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** A stream of `total` bytes in 64 KiB file messages (only the count matters to the server). */
function bulk(total: number): AppStreamRequest[] {
  const chunk = randomBytes(64 * KiB);
  return Array.from({ length: Math.ceil(total / chunk.length) }, () => fileMessage(chunk));
}

/**
 * Send every message (honouring backpressure), then half-close once the server has taken in the
 * whole stream, recording whether the server answered before the half-close (which would cost a
 * Go client the status).
 *
 * "Taken in" is two events, no fixed pause: the last write has left the client (HTTP/2 flow
 * control lets it out only once the server consumed all but its 64 KiB window; every early error
 * case has at least 1 MiB after the bad message), then a probe call on the same connection is
 * answered (the server read the socket past the whole stream, and an early answer sent before that
 * reaches the client first). A server answering at the bad message has answered by then.
 */
async function sendThenHalfClose(client: CmpTestClient, rpc: Rpc, messages: AppStreamRequest[]) {
  let halfClosed = false;
  let answeredEarly = false;
  let settle!: (o: RpcOutcome<unknown>) => void;
  const outcome = new Promise<RpcOutcome<unknown>>(resolve => (settle = resolve));
  const open = client.raw[rpc.raw] as unknown as (
    options: { deadline: number },
    cb: (err: ServiceError | null, value?: unknown) => void,
  ) => ClientWritableStream<AppStreamRequest>;
  // A deadline turns a server that stops reading into a failure instead of a hang.
  const stream = open.call(client.raw, { deadline: Date.now() + 30_000 }, (err, value) => {
    if (!halfClosed) answeredEarly = true;
    settle(err ? { code: err.code, details: err.details } : { value });
  });
  stream.on('error', () => {});
  let written = 0;
  let flushed: Promise<unknown> = Promise.resolve();
  for (const m of messages) {
    if (answeredEarly) break;
    let more = true;
    flushed = new Promise<void>(resolve => (more = stream.write(m, () => resolve())));
    if (!more) await Promise.race([once(stream, 'drain'), outcome]);
    written++;
  }
  await Promise.race([flushed, outcome]);
  const probe = await call(client, RPCS[2], { messages: [] });
  assertStatus(probe, Status.UNKNOWN, `${RPCS[2].prefix}: error receiving stream header: EOF`);
  halfClosed = true;
  stream.end();
  return { outcome: await outcome, answeredEarly, written };
}

const PROTOCOL_PLUGIN = pluginYaml(
  'protocol',
  [
    `generate:`,
    `  command: ${JSON.stringify(LIST_TREE)}`,
    `discover:`,
    `  find:`,
    `    command: [sh, -c, echo found]`,
    `parameters:`,
    `  static:`,
    `    - name: replicas`,
    `      string: "1"`,
  ].join('\n'),
);

for (const mode of MODES) {
  // One server per mode: the limits are low enough to test yet above every other test's stream.
  describe(`stream protocol and limits of the three streaming RPCs (${mode})`, () => {
    let server: CmpServer;
    let client: CmpTestClient;
    let tgz: Buffer;
    let meta: ManifestRequestMetadata;

    before(async () => {
      server = await startCmp(mode, {
        pluginYaml: PROTOCOL_PLUGIN,
        socketName: 'protocol.sock',
        env: {
          CMP_OFFLOAD_CACHE: 'off',
          CMP_OFFLOAD_MAX_TARBALL_BYTES: '4Mi',
          CMP_OFFLOAD_MAX_EXTRACTED_BYTES: '100Ki',
          CMP_OFFLOAD_MAX_ENTRIES: '20',
        },
      });
      client = openCmpClient(server.socketPath);
      tgz = buildTgz([
        { name: '.', type: 'dir' },
        { name: 'app', type: 'dir' },
        { name: 'app/config.yaml', content: 'replicas: 1\n' },
        { name: 'README.md', content: '# repo\n' },
      ]);
      meta = repoMetadata(tgz);
    });
    after(async () => {
      client?.close();
      await server?.stop();
    });
    afterEach(async () => {
      await eventually(() => leftovers(server).length === 0, 5_000, `empty work roots (left: ${leftovers(server).join(', ')})`);
    });

    test('a well-formed stream succeeds on all three RPCs', async () => {
      const generated = await client.generate({ metadata: meta, chunks: chunksOf(tgz, 1024) });
      assert.ok('value' in generated, JSON.stringify(generated));
      assert.deepEqual(JSON.parse(generated.value.manifests[0]!).entries, {
        'README.md': 'file 0644 # repo\n',
        app: 'dir 0755',
        'app/config.yaml': 'file 0644 replicas: 1\n',
      });
      assert.deepEqual(await client.match({ metadata: meta, chunks: [tgz] }), {
        value: { isSupported: true, isDiscoveryEnabled: true },
      });
      const params = await client.params({ metadata: meta, chunks: [tgz] });
      assert.ok('value' in params, JSON.stringify(params));
      assert.deepEqual(
        params.value.parameterAnnouncements.map(p => [p.name, p.string]),
        [['replicas', '1']],
      );
    });

    test('a stream half-closed before any message fails with "error receiving stream header: EOF"', async () => {
      for (const rpc of RPCS) {
        assertStatus(await call(client, rpc, { messages: [] }), Status.UNKNOWN, `${rpc.prefix}: error receiving stream header: EOF`);
      }
    });

    test('a first message that is a file chunk or carries no oneof fails with "metadata is nil"', async () => {
      for (const rpc of RPCS) {
        for (const messages of [[fileMessage(tgz)], [{}], [{}, metadataMessage(meta), fileMessage(tgz)]]) {
          assertStatus(
            await call(client, rpc, { messages }),
            Status.UNKNOWN,
            `${rpc.prefix}: error getting stream metadata: metadata is nil`,
          );
        }
      }
    });

    test('a second metadata message or an empty message after the header fails with "stream request file is nil"', async () => {
      const [first, ...rest] = chunksOf(tgz, 64).map(fileMessage);
      for (const rpc of RPCS) {
        for (const messages of [
          [metadataMessage(meta), metadataMessage(meta)],
          [metadataMessage(meta), first!, metadataMessage(meta), ...rest],
          [metadataMessage(meta), first!, {}, ...rest],
        ]) {
          assertStatus(
            await call(client, rpc, { messages }),
            Status.UNKNOWN,
            `${rpc.prefix}: error receiving tgz file: stream request file is nil`,
          );
        }
      }
    });

    test('a checksum that is not the lower-case hex sha256 of the streamed bytes fails validation', async () => {
      const variants = [
        { ...meta, checksum: meta.checksum.toUpperCase() },
        { ...meta, checksum: '' },
        { ...meta, checksum: sha256(Buffer.from('something else')) },
      ];
      for (const rpc of RPCS) {
        for (const metadata of variants) {
          assertStatus(
            await call(client, rpc, { metadata, chunks: [tgz] }),
            Status.UNKNOWN,
            `${rpc.prefix}: error receiving tgz file: file checksum validation error`,
          );
        }
        // The right checksum over a stream missing its last byte.
        assertStatus(
          await call(client, rpc, { metadata: meta, chunks: [tgz.subarray(0, tgz.length - 1)] }),
          Status.UNKNOWN,
          `${rpc.prefix}: error receiving tgz file: file checksum validation error`,
        );
      }
    });

    test('chunks of any size, empty ones included, and any size field give the same result', async () => {
      const want = await client.generate({ metadata: meta, chunks: [tgz] });
      assert.ok('value' in want, JSON.stringify(want));
      const empty = Buffer.alloc(0);
      const shapes: Array<[string, StreamCall]> = [
        ['1-byte chunks', { metadata: meta, chunks: chunksOf(tgz, 1) }],
        ['7-byte chunks', { metadata: meta, chunks: chunksOf(tgz, 7) }],
        ['empty chunks around and between', { metadata: meta, chunks: [empty, ...chunksOf(tgz, 50).flatMap(c => [c, empty]), empty] }],
        ['size 0', { metadata: { ...meta, size: 0 }, chunks: [tgz] }],
        ['a wrong size', { metadata: { ...meta, size: 123_456_789 }, chunks: [tgz] }],
      ];
      for (const [what, c] of shapes) {
        const got = await client.generate(c);
        assert.ok('value' in got, `${what}: ${JSON.stringify(got)}`);
        assert.deepEqual(JSON.parse(got.value.manifests[0]!).entries, JSON.parse(want.value.manifests[0]!).entries, what);
      }
    });

    test('a stream with metadata and no chunks is an empty gzip input: "error reading file: EOF"', async () => {
      for (const rpc of RPCS) {
        assertStatus(
          await call(client, rpc, { metadata: repoMetadata(Buffer.alloc(0)) }),
          Status.UNKNOWN,
          `${rpc.prefix}: error decompressing tgz file: error reading file: EOF`,
        );
      }
    });

    test('an error detected while receiving is answered only after the half-close, with the real status', async () => {
      const cases: Array<[string, readonly Rpc[], AppStreamRequest[], string]> = [
        ['a file chunk first', [RPCS[0]], [fileMessage(tgz), ...bulk(3 * MiB)], 'error getting stream metadata: metadata is nil'],
        // 256 KiB in, the tarball spool has a write in flight when the bad message arrives.
        [
          'a second metadata message after 256 KiB',
          RPCS,
          [metadataMessage(meta), ...bulk(256 * KiB), metadataMessage(meta), ...bulk(MiB)],
          'error receiving tgz file: stream request file is nil',
        ],
        [
          'an empty message after 256 KiB',
          RPCS,
          [metadataMessage(meta), ...bulk(256 * KiB), {}, ...bulk(MiB)],
          'error receiving tgz file: stream request file is nil',
        ],
        [
          '3 MiB that do not match the checksum',
          [RPCS[0]],
          [metadataMessage(meta), ...bulk(3 * MiB)],
          'error receiving tgz file: file checksum validation error',
        ],
      ];
      for (const [what, rpcs, messages, text] of cases) {
        for (const rpc of rpcs) {
          const r = await sendThenHalfClose(client, rpc, messages);
          assert.equal(r.answeredEarly, false, `${rpc.name}, ${what}: the server answered before the half-close`);
          assert.equal(r.written, messages.length, what);
          assertStatus(r.outcome, Status.UNKNOWN, `${rpc.prefix}: ${text}`);
        }
      }
    });

    test('a deadline reached while the client is still streaming is answered with the stream context error', async () => {
      const outcomes = await Promise.all(
        // 3 s, not 1: at load 13 a call reached the server with less than the 100 ms buffer left
        // (answered with Argo's plain context error, as on arrival after the deadline).
        RPCS.map(rpc => call(client, rpc, { metadata: meta, chunks: [tgz.subarray(0, 10)], halfClose: false, timeoutMs: 3_000 })),
      );
      RPCS.forEach((rpc, i) =>
        assertStatus(
          outcomes[i]!,
          Status.DEADLINE_EXCEEDED,
          `${rpc.prefix}: error receiving tgz file: stream context error: context deadline exceeded`,
        ),
      );
    });

    test('a client that cancels mid-stream leaves no spooled tarball behind', async () => {
      // Over the 256 KiB receive buffer, so that the tarball is being spooled when the client goes.
      const big = buildTgz([{ name: 'noise.bin', content: randomBytes(400 * KiB) }]);
      const bigMeta = repoMetadata(big);
      for (const rpc of RPCS) {
        const open = client.raw[rpc.raw] as unknown as (cb: (err: ServiceError | null) => void) => ClientWritableStream<AppStreamRequest>;
        let ended: ServiceError | null | undefined;
        const stream = open.call(client.raw, err => (ended = err));
        stream.on('error', () => {});
        stream.write(metadataMessage(bigMeta));
        for (let at = 0; at < 300 * KiB; at += KiB) stream.write(fileMessage(big.subarray(at, at + KiB)));
        await eventually(() => leftovers(server).length > 0, 5_000, 'a spool file');
        stream.cancel();
        await eventually(() => ended !== undefined, 5_000, 'the call to end');
        assert.equal(ended?.code, Status.CANCELLED);
        await eventually(() => leftovers(server).length === 0, 5_000, 'the spool file to be removed');
      }
    });

    /** A valid tarball of exactly `size` bytes: bytes after the tar end blocks are never read. */
    const tarballOfSize = (size: number): Buffer => {
      const tgz = buildTgz([{ name: 'noise.bin', content: randomBytes(40 * KiB) }]);
      assert.ok(tgz.length <= size);
      return Buffer.concat([tgz, Buffer.alloc(size - tgz.length)]);
    };

    test('a tarball over CMP_OFFLOAD_MAX_TARBALL_BYTES is refused with RESOURCE_EXHAUSTED naming the variable', async () => {
      const atLimit = tarballOfSize(4 * MiB);
      const overLimit = tarballOfSize(4 * MiB + 1);
      const big = buildTgz([{ name: 'noise.bin', content: randomBytes(6 * MiB) }]);
      for (const rpc of RPCS) {
        const ok = await call(client, rpc, { metadata: repoMetadata(atLimit), chunks: chunksOf(atLimit, 64 * KiB) });
        assert.ok('value' in ok, `${rpc.name} at the limit: ${JSON.stringify(ok)}`);
        for (const tgz of [overLimit, big]) {
          assertOurError(
            'tarballTooLarge',
            await call(client, rpc, { metadata: repoMetadata(tgz), chunks: chunksOf(tgz, 64 * KiB) }),
            [4194304],
            { prefix: `${rpc.prefix}: error receiving tgz file: ` },
          );
        }
      }
    });

    test('after an early error the stream is drained only up to the tarball limit, then the first error is answered', async () => {
      const rpc = RPCS[0];
      const messages = [fileMessage(Buffer.alloc(10)), ...bulk(16 * MiB)];
      const r = await sendThenHalfClose(client, rpc, messages);
      assert.equal(r.answeredEarly, true, 'the server kept reading past the tarball limit');
      assert.ok(r.written < messages.length);
      assertStatus(r.outcome, Status.UNKNOWN, `${rpc.prefix}: error getting stream metadata: metadata is nil`);
    });

    test('a tarball that inflates past CMP_OFFLOAD_MAX_EXTRACTED_BYTES is refused with RESOURCE_EXHAUSTED', async () => {
      const fits = buildTgz([
        { name: 'a', content: Buffer.alloc(60 * KiB) },
        { name: 'b', content: Buffer.alloc(40 * KiB) },
      ]);
      const over = buildTgz([
        { name: 'a', content: Buffer.alloc(60 * KiB) },
        { name: 'b', content: Buffer.alloc(40 * KiB + 1) },
      ]);
      // 20 MiB of zeros in a few KiB, and a header declaring 1 GiB that never follows.
      const bomb = gzipBytes(buildTar([{ name: 'zeros', content: Buffer.alloc(20 * MiB) }]), 9);
      const declared = gzipBytes(headerBlock({ name: 'bomb', typeflag: '0', size: 1 << 30 }));
      for (const rpc of RPCS) {
        const ok = await call(client, rpc, { metadata: repoMetadata(fits), chunks: [fits] });
        assert.ok('value' in ok, `${rpc.name} at the limit: ${JSON.stringify(ok)}`);
        for (const tgz of [over, bomb, declared]) {
          assertOurError(
            'extractedTooLarge',
            await call(client, rpc, { metadata: repoMetadata(tgz), chunks: [tgz] }),
            [102400],
            { prefix: `${rpc.prefix}: error decompressing tgz file: ` },
          );
        }
      }
    });

    test('a tarball with more entries than CMP_OFFLOAD_MAX_ENTRIES is refused with RESOURCE_EXHAUSTED', async () => {
      const files = (n: number) => buildTgz(Array.from({ length: n }, (_, i) => ({ name: `f${i}`, content: `${i}` })));
      const twenty = files(20);
      const many = files(21);
      for (const rpc of RPCS) {
        const ok = await call(client, rpc, { metadata: repoMetadata(twenty), chunks: [twenty] });
        assert.ok('value' in ok, `${rpc.name} at the limit: ${JSON.stringify(ok)}`);
        assertOurError(
          'tooManyEntries',
          await call(client, rpc, { metadata: repoMetadata(many), chunks: [many] }),
          [20],
          { prefix: `${rpc.prefix}: error decompressing tgz file: ` },
        );
      }
    });
  });
}
