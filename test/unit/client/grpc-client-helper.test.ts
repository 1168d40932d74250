import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { status as Status } from '@grpc/grpc-js';
import { chunksOf, fileMessage, metadataMessage, openCmpClient, repoMetadata } from '../../helpers/grpc-client.js';
import { startRecordingServer } from './recording-server.js';

test('the test client sends metadata and chunks of any size, empty ones included, and returns the response', async () => {
  const server = await startRecordingServer({ manifests: ['{}'] });
  const client = openCmpClient(server.socketPath);
  try {
    const tgz = randomBytes(100);
    const meta = repoMetadata(tgz, { appRelPath: 'a', env: [{ name: 'X', value: '1' }] });
    const outcome = await client.generate({ metadata: meta, chunks: [tgz.subarray(0, 7), Buffer.alloc(0), tgz.subarray(7)] });
    assert.deepEqual(outcome, { value: { manifests: ['{}'], sourceType: '' } });
    const call = await server.callEnded(1);
    assert.deepEqual(call.messages[0]!.metadata, meta);
    assert.deepEqual(
      call.messages.slice(1).map((m) => m.file!.chunk.length),
      [7, 0, 93],
    );
    assert.equal(call.halfClosed, true);
  } finally {
    client.close();
    await server.stop();
  }
});

test('the test client can half-close at once, skip the metadata, send two metadata or a message with no oneof', async () => {
  const server = await startRecordingServer();
  const client = openCmpClient(server.socketPath);
  try {
    const meta = repoMetadata(Buffer.from('x'));
    await client.match({ messages: [] });
    await client.match({ metadata: null, chunks: [Buffer.from('x')] });
    await client.match({ messages: [metadataMessage(meta), metadataMessage(meta)] });
    await client.params({ messages: [{}, fileMessage(Buffer.from('y'))] });
    const calls = await Promise.all([1, 2, 3, 4].map((n) => server.callEnded(n)));
    assert.equal(calls[0]!.messages.length, 0);
    assert.ok(calls[0]!.halfClosed);
    assert.equal(calls[1]!.messages[0]!.metadata, undefined);
    assert.deepEqual(calls[1]!.messages[0]!.file!.chunk, Buffer.from('x'));
    assert.deepEqual(calls[2]!.messages.map((m) => m.metadata !== undefined), [true, true]);
    assert.deepEqual(calls[3]!.messages[0], { metadata: undefined, file: undefined });
    assert.equal(calls[3]!.rpc, 'getParametersAnnouncement');
  } finally {
    client.close();
    await server.stop();
  }
});

test('the test client without half-close ends at its deadline', async () => {
  const server = await startRecordingServer();
  const client = openCmpClient(server.socketPath);
  try {
    const outcome = await client.generate({ metadata: repoMetadata(Buffer.alloc(0)), halfClose: false, timeoutMs: 200 });
    assert.deepEqual(outcome, { code: Status.DEADLINE_EXCEEDED, details: 'context deadline exceeded' });
    assert.equal(server.calls[0]!.halfClosed, false);
  } finally {
    client.close();
    await server.stop();
  }
});

test('the test client calls CheckPluginConfiguration and reports a missing server as a status', async () => {
  const server = await startRecordingServer();
  const client = openCmpClient(server.socketPath);
  try {
    assert.deepEqual(await client.check(), { value: { isDiscoveryConfigured: true, provideGitCreds: false } });
  } finally {
    client.close();
    await server.stop();
  }
  const gone = openCmpClient(server.socketPath);
  try {
    const outcome = await gone.check(2000);
    assert.equal('code' in outcome && outcome.code, Status.UNAVAILABLE);
  } finally {
    gone.close();
  }
});

test('chunksOf cuts like the repo-server and refuses a zero size', () => {
  assert.deepEqual(chunksOf(Buffer.from('abcdefg'), 3).map(String), ['abc', 'def', 'g']);
  assert.deepEqual(chunksOf(Buffer.alloc(0), 3), []);
  assert.throws(() => chunksOf(Buffer.from('a'), 0), /positive integer/);
});
