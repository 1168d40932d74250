import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import {
  ASKPASS_MAX_MESSAGE_BYTES,
  AskpassError,
  getCredentials,
  serveAskpass,
  type GitCredentials,
} from '../../../cmp/askpass/askpass-grpc.js';
import { Status } from '../../../cmp/grpc-status.js';
import { AskPassServiceClient, AskPassServiceService } from '../../../proto/generated/askpass/askpass.js';
import { startFakeAskpass, type FakeAskpass } from '../../helpers/fake-askpass.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'askpass-grpc-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));
let n = 0;
const sockPath = () => path.join(tmp, `s${n++}.sock`);

/** The call's outcome: the credentials, or the AskpassError's status. */
async function outcome(p: Promise<GitCredentials>): Promise<GitCredentials | { code: number; details: string }> {
  try {
    return await p;
  } catch (err) {
    assert.ok(err instanceof AskpassError, `not an AskpassError: ${String(err)}`);
    return { code: err.code, details: err.details };
  }
}

/** A call with a raw client (no message limits of ours), for what the server itself bounds. */
function rawCall(socketPath: string, nonce: string): Promise<{ code: number; details: string } | GitCredentials> {
  const client = new AskPassServiceClient(`unix:${socketPath}`, grpc.credentials.createInsecure());
  return new Promise(resolve =>
    client.getCredentials({ nonce }, (err, res) => {
      client.close();
      resolve(err ? { code: err.code, details: err.details } : res);
    }),
  );
}

describe('askpass server and client, with the fake repo-server', () => {
  let fake: FakeAskpass;
  let socket: string;
  before(async () => {
    socket = sockPath();
    fake = await startFakeAskpass(socket);
  });
  after(() => fake.stop());

  test('a nonce the server handed out buys its credentials', async () => {
    const nonce = fake.add({ username: 'alice', password: 's3cr3t: with spaces and ünïcode' });
    assert.deepEqual(await outcome(getCredentials(socket, nonce, 5_000)), { username: 'alice', password: 's3cr3t: with spaces and ünïcode' });
    assert.deepEqual(fake.calls().slice(-1), [nonce]);
  });

  test("an unknown nonce: Argo's NotFound \"unknown nonce\"", async () => {
    const nonce = fake.add({ username: 'u', password: 'p' });
    fake.remove(nonce);
    assert.deepEqual(await outcome(getCredentials(socket, nonce, 5_000)), { code: Status.NOT_FOUND, details: 'unknown nonce' });
  });

  test('an empty nonce: InvalidArgument "missing nonce", without asking the answer', async () => {
    const before = fake.calls().length;
    assert.deepEqual(await outcome(getCredentials(socket, '', 5_000)), { code: Status.INVALID_ARGUMENT, details: 'missing nonce' });
    assert.equal(fake.calls().length, before);
  });

  test('the server refuses a request beyond 64 KiB without asking the answer; the client does not send one', async () => {
    const before = fake.calls().length;
    const huge = 'n'.repeat(ASKPASS_MAX_MESSAGE_BYTES + 1);
    const seen = await rawCall(socket, huge);
    assert.equal((seen as { code: number }).code, Status.RESOURCE_EXHAUSTED, JSON.stringify(seen).slice(0, 200));
    const ours = await outcome(getCredentials(socket, huge, 5_000));
    assert.equal((ours as { code: number }).code, Status.RESOURCE_EXHAUSTED, JSON.stringify(ours).slice(0, 200));
    assert.equal(fake.calls().length, before);
  });
});

describe('askpass server: what answer() throws', () => {
  test('an AskpassError is its status; any other error is UNAVAILABLE with its message', async () => {
    const socket = sockPath();
    const server = await serveAskpass(socket, async nonce => {
      if (nonce === 'denied') throw new AskpassError(Status.PERMISSION_DENIED, 'not yours');
      throw new Error('relay down: redis gone');
    });
    try {
      assert.deepEqual(await outcome(getCredentials(socket, 'denied', 5_000)), { code: Status.PERMISSION_DENIED, details: 'not yours' });
      assert.deepEqual(await outcome(getCredentials(socket, 'other', 5_000)), { code: Status.UNAVAILABLE, details: 'relay down: redis gone' });
    } finally {
      await server.close();
    }
  });
});

describe('askpass client failures', () => {
  test('nothing listening on the socket: UNAVAILABLE, at once', async () => {
    const t0 = Date.now();
    const seen = await outcome(getCredentials(path.join(tmp, 'nobody.sock'), 'n', 10_000));
    assert.equal((seen as { code: number }).code, Status.UNAVAILABLE, JSON.stringify(seen));
    assert.match((seen as { details: string }).details, /ENOENT|No connection established/);
    assert.ok(Date.now() - t0 < 5_000, `took ${Date.now() - t0} ms`);
  });

  test('an answer that never comes: DEADLINE_EXCEEDED after timeoutMs', async () => {
    const socket = sockPath();
    const server = await serveAskpass(socket, () => new Promise<GitCredentials>(() => {}));
    try {
      const t0 = Date.now();
      const seen = await outcome(getCredentials(socket, 'n', 300));
      const took = Date.now() - t0;
      assert.equal((seen as { code: number }).code, Status.DEADLINE_EXCEEDED, JSON.stringify(seen));
      assert.ok(took >= 250 && took < 3_000, `took ${took} ms`);
    } finally {
      await server.close();
    }
  });

  test('the client refuses an answer beyond 64 KiB', async () => {
    // A server without our limits, so that the limit seen is the client's.
    const socket = sockPath();
    const server = new grpc.Server();
    server.addService(AskPassServiceService, {
      getCredentials: (_call: unknown, cb: grpc.sendUnaryData<GitCredentials>) => cb(null, { username: 'u', password: 'p'.repeat(ASKPASS_MAX_MESSAGE_BYTES) }),
    });
    await new Promise<void>((resolve, reject) => server.bindAsync(`unix:${socket}`, grpc.ServerCredentials.createInsecure(), e => (e ? reject(e) : resolve())));
    try {
      const seen = await outcome(getCredentials(socket, 'n', 5_000));
      assert.equal((seen as { code: number }).code, Status.RESOURCE_EXHAUSTED, JSON.stringify(seen).slice(0, 200));
      // The same server answers a client without the limit (so the limit is what refused it).
      assert.equal(((await rawCall(socket, 'n')) as GitCredentials).password.length, ASKPASS_MAX_MESSAGE_BYTES);
    } finally {
      server.forceShutdown();
    }
  });

  test('a socket path beyond 107 bytes is refused with a text that says so, by server and client', async () => {
    const long = path.join(tmp, 'x'.repeat(120) + '.sock');
    await assert.rejects(serveAskpass(long, async () => ({ username: '', password: '' })), /is 1\d\d bytes: Linux allows a unix socket path at most 107/);
    const seen = await outcome(getCredentials(long, 'n', 1_000));
    assert.equal((seen as { code: number }).code, Status.UNAVAILABLE);
    assert.match((seen as { details: string }).details, /at most 107/);
  });
});

describe('askpass server: socket file and close()', () => {
  test('a stale socket file (its server killed) is replaced; a file that is no socket is kept and refused', async () => {
    const socket = sockPath();
    const child = spawn(process.execPath, ['-e', `require('net').createServer().listen(${JSON.stringify(socket)}, () => console.log('up'))`], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>(resolve => child.stdout.once('data', () => resolve()));
    child.kill('SIGKILL');
    await new Promise(resolve => child.once('exit', resolve));
    assert.ok(fs.lstatSync(socket).isSocket(), 'the killed server left its socket file');
    const server = await serveAskpass(socket, async () => ({ username: 'u', password: 'p' }));
    assert.deepEqual(await outcome(getCredentials(socket, 'n', 5_000)), { username: 'u', password: 'p' });
    await server.close();

    const file = sockPath();
    fs.writeFileSync(file, 'keep me');
    await assert.rejects(serveAskpass(file, async () => ({ username: 'u', password: 'p' })), { message: `askpass socket path ${file} exists and is not a socket` });
    assert.equal(fs.readFileSync(file, 'utf8'), 'keep me');
  });

  test('close() cancels a call in flight, removes the socket file, is idempotent; calls then fail UNAVAILABLE', async () => {
    const socket = sockPath();
    let asked = 0;
    const server = await serveAskpass(socket, () => {
      asked++;
      return new Promise<GitCredentials>(() => {});
    });
    const inflight = outcome(getCredentials(socket, 'n', 20_000));
    while (asked === 0) await new Promise(resolve => setTimeout(resolve, 10));
    const t0 = Date.now();
    await Promise.all([server.close(), server.close()]);
    const seen = await inflight;
    assert.ok(Date.now() - t0 < 3_000, `the call in flight ended ${Date.now() - t0} ms after close()`);
    // forceShutdown cancels the server's streams (RST_STREAM CANCEL), which the client sees as CANCELLED.
    assert.deepEqual(seen, { code: Status.CANCELLED, details: 'Call cancelled' });
    assert.equal(fs.existsSync(socket), false);
    await server.close();
    assert.equal(((await outcome(getCredentials(socket, 'n', 5_000))) as { code: number }).code, Status.UNAVAILABLE);
  });

  test("close() leaves a socket another server has since bound at the same path", async () => {
    const socket = sockPath();
    const a = await serveAskpass(socket, async () => ({ username: 'a', password: 'a' }));
    const b = await serveAskpass(socket, async () => ({ username: 'b', password: 'b' }));
    try {
      assert.deepEqual(fs.readdirSync(tmp).filter(f => f.startsWith('.askpass-')), [], 'no temporary name left once bound');
      await a.close();
      assert.ok(fs.lstatSync(socket).isSocket());
      assert.deepEqual(await outcome(getCredentials(socket, 'n', 5_000)), { username: 'b', password: 'b' });
    } finally {
      await b.close();
    }
  });
});

test('a socket path of exactly 107 bytes (no room for the temporary name) is served and removed on close', async () => {
  const dir = path.join(tmp, 'd'.repeat(40));
  fs.mkdirSync(dir, { recursive: true });
  const socket = path.join(dir, 'x'.repeat(107 - dir.length - 1));
  assert.equal(Buffer.byteLength(socket), 107);
  const server = await serveAskpass(socket, async () => ({ username: 'u', password: 'p' }));
  assert.deepEqual(await outcome(getCredentials(socket, 'n', 5_000)), { username: 'u', password: 'p' });
  assert.deepEqual(fs.readdirSync(dir), [path.basename(socket)], 'nothing left beside the socket');
  await server.close();
  assert.deepEqual(fs.readdirSync(dir), []);
});
