import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { AskPassServiceClient, AskPassServiceService, type CredentialsRequest, type CredentialsResponse } from '../../proto/generated/askpass/askpass.js';
import { messageOf } from '../errors.js';
import { Status } from '../grpc-status.js';
import { AskpassError, type GitCredentials } from './askpass-error.js';

export { AskpassError, type GitCredentials } from './askpass-error.js';

export interface AskpassServer {
  readonly socketPath: string;
  close(): Promise<void>;
}

/**
 * Both ways, a request is one nonce (a uuid) and an answer a username and a password or token:
 * 64 KiB leaves room for long tokens (a GitHub App's, a JWT) and keeps a hostile peer's message small.
 */
export const ASKPASS_MAX_MESSAGE_BYTES = 64 * 1024;

/** Longest unix socket path Linux accepts (sun_path is 108 bytes with its NUL). */
const MAX_SOCKET_PATH_BYTES = 107;

const MESSAGE_LIMITS = {
  'grpc.max_receive_message_length': ASKPASS_MAX_MESSAGE_BYTES,
  'grpc.max_send_message_length': ASKPASS_MAX_MESSAGE_BYTES,
};

/** Why `socketPath` cannot be a unix socket address, if it cannot. */
function socketPathProblem(socketPath: string): string | undefined {
  if (socketPath === '') return 'askpass socket path is empty';
  if (socketPath.includes('\0')) return 'askpass socket path contains a NUL byte';
  const bytes = Buffer.byteLength(socketPath);
  if (bytes > MAX_SOCKET_PATH_BYTES) {
    return `askpass socket path ${socketPath} is ${bytes} bytes: Linux allows a unix socket path at most ${MAX_SOCKET_PATH_BYTES}`;
  }
  return undefined;
}

/** A stale socket file (its server gone) is replaced; any other file at the path is kept and refused. */
async function checkReplaceable(socketPath: string): Promise<boolean> {
  const st = await fs.lstat(socketPath).catch(() => undefined); // nothing there: listen makes it
  if (st !== undefined && !st.isSocket()) throw new Error(`askpass socket path ${socketPath} exists and is not a socket`);
  return st !== undefined;
}

/**
 * Serve AskPassService on a unix socket (a stale socket file is replaced). An empty nonce gets
 * InvalidArgument "missing nonce" without calling `answer`; `answer` throwing AskpassError gives
 * that status; any other error gives UNAVAILABLE with its message. close(): stops accepting,
 * cancels in-flight calls, removes the socket file; idempotent.
 */
export async function serveAskpass(socketPath: string, answer: (nonce: string) => Promise<GitCredentials>): Promise<AskpassServer> {
  const problem = socketPathProblem(socketPath);
  if (problem !== undefined) throw new Error(problem);
  const stale = await checkReplaceable(socketPath);
  // Bound under a temporary name, then renamed into place: the path is never missing while a
  // stale socket is replaced, and libuv's unlink of the bound name on close hits the temporary
  // name, so that close() removes the socket only if it is still ours (see below). A path too
  // long for the temporary name is bound directly.
  const temp = path.join(path.dirname(socketPath), `.askpass-${randomBytes(4).toString('hex')}`);
  const bindPath = Buffer.byteLength(temp) <= MAX_SOCKET_PATH_BYTES ? temp : socketPath;
  if (bindPath === socketPath && stale) await fs.unlink(socketPath);
  const server = new grpc.Server(MESSAGE_LIMITS);
  server.addService(AskPassServiceService, {
    getCredentials(call: grpc.ServerUnaryCall<CredentialsRequest, CredentialsResponse>, cb: grpc.sendUnaryData<CredentialsResponse>) {
      const nonce = call.request.nonce;
      // Argo's server texts (reposerver/askpass): checked before any lookup.
      if (nonce === '') return cb({ code: Status.INVALID_ARGUMENT, details: 'missing nonce' });
      answer(nonce).then(
        c => cb(null, { username: c.username, password: c.password }),
        (err: unknown) =>
          cb(
            err instanceof AskpassError
              ? { code: err.code, details: err.details }
              : { code: Status.UNAVAILABLE, details: messageOf(err) },
          ),
      );
    },
  });
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(`unix:${bindPath}`, grpc.ServerCredentials.createInsecure(), err => (err ? reject(err) : resolve())),
  ).catch((err: unknown) => {
    server.forceShutdown();
    throw new Error(`cannot listen on askpass socket ${socketPath}: ${messageOf(err)}`);
  });
  if (bindPath !== socketPath) {
    await fs.rename(bindPath, socketPath).catch((err: unknown) => {
      server.forceShutdown();
      throw err;
    });
  }
  // The socket we bound, so that close() never removes one another server has since put there.
  const ino = (await fs.lstat(socketPath)).ino;
  let closed: Promise<void> | undefined;
  return {
    socketPath,
    close() {
      closed ??= (async () => {
        server.forceShutdown();
        // Already gone, or replaced by another server's socket: not ours to remove.
        const st = await fs.lstat(socketPath).catch(() => undefined);
        if (st?.isSocket() && st.ino === ino) await fs.unlink(socketPath).catch(() => {}); // gone meanwhile
      })();
      return closed;
    },
  };
}

/**
 * One GetCredentials call, dialing `unix:<socketPath>`, bounded by timeoutMs; failures become
 * AskpassError (the server's status; a connection failure UNAVAILABLE; the deadline DEADLINE_EXCEEDED).
 */
export async function getCredentials(socketPath: string, nonce: string, timeoutMs: number): Promise<GitCredentials> {
  const problem = socketPathProblem(socketPath);
  if (problem !== undefined) throw new AskpassError(Status.UNAVAILABLE, problem);
  const client = new AskPassServiceClient(`unix:${socketPath}`, grpc.credentials.createInsecure(), {
    ...MESSAGE_LIMITS,
    // One call: a failed connection is the answer, not something to wait out.
    'grpc.enable_retries': 0,
  });
  try {
    return await new Promise<GitCredentials>((resolve, reject) => {
      client.getCredentials({ nonce }, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (err, res) => {
        if (err) reject(new AskpassError(err.code, err.details));
        else resolve({ username: res.username, password: res.password });
      });
    });
  } finally {
    client.close();
  }
}
