import { randomUUID } from 'node:crypto';
import { AskpassError, serveAskpass, type GitCredentials } from '../../cmp/askpass/askpass-grpc.js';
import { Status } from '../../cmp/grpc-status.js';

export interface FakeAskpass {
  /** Register credentials; the nonce (a uuid) that buys them. */
  add(creds: GitCredentials): string;
  remove(nonce: string): void;
  /** Every nonce asked for, in order, known or not (an empty one is refused before it counts). */
  calls(): string[];
  stop(): Promise<void>;
}

/**
 * The repo-server's askpass service as a plugin sees it (ARGOCD_ASK_PASS_SOCK): nonces it
 * handed out buy credentials, any other gets Argo's NotFound "unknown nonce".
 */
export async function startFakeAskpass(socketPath: string): Promise<FakeAskpass> {
  const creds = new Map<string, GitCredentials>();
  const asked: string[] = [];
  const server = await serveAskpass(socketPath, async nonce => {
    asked.push(nonce);
    const c = creds.get(nonce);
    if (c === undefined) throw new AskpassError(Status.NOT_FOUND, 'unknown nonce');
    return c;
  });
  return {
    add(c) {
      const nonce = randomUUID();
      creds.set(nonce, { ...c });
      return nonce;
    },
    remove(nonce) {
      creds.delete(nonce);
    },
    calls: () => [...asked],
    stop: () => server.close(),
  };
}
