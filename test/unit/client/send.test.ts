import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { status as Status } from '@grpc/grpc-js';
import type { AppStreamRequest } from '../../../proto/generated/cmpserver/plugin/plugin.js';
import { callClientStream } from '../../../cli/client-stream.js';
import { connectPlugin, grpcMaxMessageBytes } from '../../../cli/connect.js';
import { cmpChunkSize, sendRepoStream, type RepoStreamPayload } from '../../../cli/send.js';
import { startRecordingServer, type RecordedCall } from './recording-server.js';

function tempFile(bytes: Buffer): { file: string; cleanup: () => void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-send-'));
  const file = path.join(dir, 'repo.tgz');
  fs.writeFileSync(file, bytes);
  return { file, cleanup: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

function payloadFor(file: string, bytes: Buffer): RepoStreamPayload {
  return {
    tgzPath: file,
    checksum: createHash('sha256').update(bytes).digest('hex'),
    size: bytes.length,
    appRelPath: 'apps/guestbook',
    appName: 'guestbook',
    env: [
      { name: 'ARGOCD_APP_NAME', value: 'guestbook' },
      { name: 'EMPTY', value: '' },
    ],
  };
}

function chunkSizes(call: RecordedCall): number[] {
  return call.messages.slice(1).map((m) => m.file!.chunk.length);
}

async function sendAndRecord(bytes: Buffer, chunkSize: number) {
  const server = await startRecordingServer({ manifests: ['{"kind":"ConfigMap"}'] });
  const client = connectPlugin(server.socketPath);
  const { file, cleanup } = tempFile(bytes);
  try {
    const outcome = await sendRepoStream(client, 'generateManifest', payloadFor(file, bytes), { chunkSize });
    const call = await server.callEnded(1);
    return { outcome, call };
  } finally {
    client.close();
    cleanup();
    await server.stop();
  }
}

test('the sender streams one metadata message, then chunks of exactly chunkSize but the last, then half-closes', async () => {
  const bytes = randomBytes(10_000);
  const { outcome, call } = await sendAndRecord(bytes, 1024);
  assert.deepEqual(outcome, { value: { manifests: ['{"kind":"ConfigMap"}'], sourceType: '' } });
  const [first, ...rest] = call.messages;
  assert.deepEqual(first!.metadata, {
    appName: 'guestbook',
    appRelPath: 'apps/guestbook',
    checksum: createHash('sha256').update(bytes).digest('hex'),
    size: 10_000,
    env: [
      { name: 'ARGOCD_APP_NAME', value: 'guestbook' },
      { name: 'EMPTY', value: '' },
    ],
  });
  assert.equal(first!.file, undefined);
  assert.ok(rest.every((m) => m.metadata === undefined && m.file !== undefined));
  assert.deepEqual(chunkSizes(call), [...Array(9).fill(1024), 10_000 - 9 * 1024]);
  assert.deepEqual(Buffer.concat(rest.map((m) => m.file!.chunk)), bytes);
  assert.equal(call.halfClosed, true);
});

test('chunks stay exact across the sender read blocks when the chunk size does not divide them', async () => {
  const bytes = randomBytes(600_000);
  const { call } = await sendAndRecord(bytes, 1000);
  assert.deepEqual(chunkSizes(call), Array(600).fill(1000));
  assert.deepEqual(Buffer.concat(call.messages.slice(1).map((m) => m.file!.chunk)), bytes);
});

test('a file that is a multiple of the chunk size ends without an empty chunk, and an empty file sends no chunk', async () => {
  const { call } = await sendAndRecord(randomBytes(4096), 2048);
  assert.deepEqual(chunkSizes(call), [2048, 2048]);
  const empty = await sendAndRecord(Buffer.alloc(0), 1024);
  assert.equal(empty.call.messages.length, 1);
  assert.equal(empty.call.halfClosed, true);
});

test('a chunk size larger than the file sends the file in one message', async () => {
  const { call } = await sendAndRecord(randomBytes(3000), 1 << 20);
  assert.deepEqual(chunkSizes(call), [3000]);
});

test('an error status from the server comes back as code and details', async () => {
  const server = await startRecordingServer({
    error: { code: Status.UNKNOWN, details: 'error generating manifests: `sh -c "exit 3"` failed exit status 3' },
  });
  const client = connectPlugin(server.socketPath);
  const bytes = randomBytes(5000);
  const { file, cleanup } = tempFile(bytes);
  try {
    const outcome = await sendRepoStream(client, 'matchRepository', payloadFor(file, bytes), { chunkSize: 1024 });
    assert.deepEqual(outcome, {
      code: Status.UNKNOWN,
      details: 'error generating manifests: `sh -c "exit 3"` failed exit status 3',
    });
  } finally {
    client.close();
    cleanup();
    await server.stop();
  }
});

test('when the server answers before reading everything the sender stops and returns that status', async () => {
  const server = await startRecordingServer({
    when: 'first-message',
    pause: true,
    error: { code: Status.UNKNOWN, details: 'early' },
  });
  const client = connectPlugin(server.socketPath);
  const bytes = randomBytes(16 << 20);
  const { file, cleanup } = tempFile(bytes);
  try {
    const outcome = await sendRepoStream(client, 'generateManifest', payloadFor(file, bytes), { chunkSize: 1024 });
    assert.deepEqual(outcome, { code: Status.UNKNOWN, details: 'early' });
  } finally {
    client.close();
    cleanup();
    await server.stop();
  }
});

test('the sender waits on write backpressure instead of buffering the whole stream', async () => {
  const server = await startRecordingServer({ pause: true });
  const client = connectPlugin(server.socketPath);
  const total = 200_000; // 200 MiB if it were all produced at once
  let produced = 0;
  function* messages(): Generator<AppStreamRequest> {
    yield { metadata: { appName: 'a', appRelPath: '.', checksum: '', size: 0, env: [] } };
    for (; produced < total; produced++) yield { file: { chunk: Buffer.alloc(1024) } };
  }
  try {
    const pending = callClientStream(client, 'matchRepository', messages(), { deadline: Date.now() + 1500 });
    await new Promise((r) => setTimeout(r, 500));
    const whilePaused = produced;
    assert.ok(whilePaused < 20_000, `produced ${whilePaused} messages while the server did not read`);
    const outcome = await pending;
    assert.equal('code' in outcome && outcome.code, Status.DEADLINE_EXCEEDED);
  } finally {
    client.close();
    await server.stop();
  }
});

test('a deadline is sent to the server and an expired call reads context deadline exceeded like grpc-go', async () => {
  const server = await startRecordingServer({ when: 'hang' });
  const client = connectPlugin(server.socketPath);
  const bytes = randomBytes(100);
  const { file, cleanup } = tempFile(bytes);
  try {
    const deadline = Date.now() + 300;
    const outcome = await sendRepoStream(client, 'getParametersAnnouncement', payloadFor(file, bytes), {
      chunkSize: 1024,
      deadline,
    });
    assert.deepEqual(outcome, { code: Status.DEADLINE_EXCEEDED, details: 'context deadline exceeded' });
    const call = server.calls[0]!;
    assert.ok(Number.isFinite(call.deadline) && Math.abs(call.deadline - deadline) < 250, `server deadline ${call.deadline}`);
  } finally {
    client.close();
    cleanup();
    await server.stop();
  }
});

test('a response larger than the client limit fails with ResourceExhausted', async () => {
  const server = await startRecordingServer({ manifests: ['x'.repeat(5000)] });
  const client = connectPlugin(server.socketPath, { maxMessageBytes: 1024 });
  const bytes = randomBytes(10);
  const { file, cleanup } = tempFile(bytes);
  try {
    const outcome = await sendRepoStream(client, 'generateManifest', payloadFor(file, bytes), { chunkSize: 1024 });
    assert.equal('code' in outcome && outcome.code, Status.RESOURCE_EXHAUSTED);
  } finally {
    client.close();
    cleanup();
    await server.stop();
  }
});

test('a chunk larger than the client limit is refused by the client with ResourceExhausted', async () => {
  const server = await startRecordingServer();
  const client = connectPlugin(server.socketPath, { maxMessageBytes: 4096 });
  const bytes = randomBytes(10_000);
  const { file, cleanup } = tempFile(bytes);
  try {
    const outcome = await sendRepoStream(client, 'generateManifest', payloadFor(file, bytes), { chunkSize: 8192 });
    assert.equal('code' in outcome && outcome.code, Status.RESOURCE_EXHAUSTED);
  } finally {
    client.close();
    cleanup();
    await server.stop();
  }
});

test('a missing socket ends as an Unavailable status, not an exception', async () => {
  const client = connectPlugin(path.join(os.tmpdir(), `no-such-${process.pid}.sock`));
  const bytes = randomBytes(10);
  const { file, cleanup } = tempFile(bytes);
  try {
    const outcome = await sendRepoStream(client, 'generateManifest', payloadFor(file, bytes), {
      chunkSize: 1024,
      deadline: Date.now() + 5000,
    });
    assert.equal('code' in outcome && outcome.code, Status.UNAVAILABLE);
  } finally {
    client.close();
    cleanup();
  }
});

test('ARGOCD_CMP_CHUNK_SIZE defaults to 1024, ignores non-integers like Go Atoi and rejects zero and negatives', () => {
  assert.equal(cmpChunkSize({}), 1024);
  assert.equal(cmpChunkSize({ ARGOCD_CMP_CHUNK_SIZE: '' }), 1024);
  assert.equal(cmpChunkSize({ ARGOCD_CMP_CHUNK_SIZE: 'abc' }), 1024);
  assert.equal(cmpChunkSize({ ARGOCD_CMP_CHUNK_SIZE: '1.5' }), 1024);
  assert.equal(cmpChunkSize({ ARGOCD_CMP_CHUNK_SIZE: ' 10' }), 1024);
  assert.equal(cmpChunkSize({ ARGOCD_CMP_CHUNK_SIZE: '+2048' }), 2048);
  assert.equal(cmpChunkSize({ ARGOCD_CMP_CHUNK_SIZE: '65536' }), 65536);
  assert.throws(() => cmpChunkSize({ ARGOCD_CMP_CHUNK_SIZE: '0' }), /invalid ARGOCD_CMP_CHUNK_SIZE "0": must be a positive integer/);
  assert.throws(() => cmpChunkSize({ ARGOCD_CMP_CHUNK_SIZE: '-1' }), /must be a positive integer/);
  assert.throws(() => cmpChunkSize({ ARGOCD_CMP_CHUNK_SIZE: '99999999999999999999' }), /larger than/);
});

test('ARGOCD_GRPC_MAX_SIZE_MB sets the client message limit in MiB, default 100', () => {
  assert.equal(grpcMaxMessageBytes({}), 100 * 1024 * 1024);
  assert.equal(grpcMaxMessageBytes({ ARGOCD_GRPC_MAX_SIZE_MB: '1' }), 1024 * 1024);
  assert.equal(grpcMaxMessageBytes({ ARGOCD_GRPC_MAX_SIZE_MB: 'x' }), 100 * 1024 * 1024);
  assert.equal(grpcMaxMessageBytes({ ARGOCD_GRPC_MAX_SIZE_MB: '-5' }), 100 * 1024 * 1024);
  assert.equal(grpcMaxMessageBytes({ ARGOCD_GRPC_MAX_SIZE_MB: '4096' }), 2 ** 31 - 1);
});
