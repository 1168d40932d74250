import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { Status } from '../grpc-status.js';
import { CmpError, messageOf } from '../errors.js';
import type { EnvEntry, GitCredsSource } from '../plugin/request.js';
import { rewriteGitCredsEnv } from './git-creds-env.js';
import { AskpassError } from './askpass-error.js';
import type { AskpassServer } from './askpass-grpc.js';

/**
 * A run's own git credentials, where the repo-server's askpass socket and temp files are out of
 * reach (a worker's job): a directory of the work root only this uid may enter, holding 0600
 * copies of the credential files and an askpass socket that answers the request's nonce only,
 * asking `source` each time git asks. The run gets the request env with those paths in place of
 * the repo-server's, which is all it sees of the difference; everything is removed when the run
 * ends, however it ends.
 */
export async function withRunAskpass<T>(workRoot: string, env: readonly EnvEntry[], source: GitCredsSource, run: (env: EnvEntry[]) => Promise<T>): Promise<T> {
  const dir = path.join(workRoot, `${randomUUID()}.git-creds`);
  let server: AskpassServer | undefined;
  try {
    const files = new Map<string, string>();
    let socket: string | undefined;
    try {
      await fs.mkdir(dir, { mode: 0o700 });
      for (const [original, data] of source.files) {
        const copy = path.join(dir, `file-${files.size}`);
        await fs.writeFile(copy, data, { mode: 0o600, flag: 'wx' });
        files.set(original, copy);
      }
      if (source.nonce !== undefined) {
        socket = path.join(dir, 'askpass.sock');
        // Loaded for such runs only: grpc-js costs the runner's start otherwise.
        const { serveAskpass } = await import('./askpass-grpc.js');
        const nonce = source.nonce;
        server = await serveAskpass(socket, async asked => {
          if (asked !== nonce) throw new AskpassError(Status.NOT_FOUND, 'unknown nonce');
          return source.credentials();
        });
      }
    } catch (err) {
      throw new CmpError(`cmp-offload: cannot set up the run's git credentials: ${messageOf(err)}`, Status.INTERNAL);
    }
    return await run(rewriteGitCredsEnv(env, { ...(socket !== undefined ? { socket } : {}), files }));
  } finally {
    await server?.close().catch(() => {}); // the run's own result or error is what counts; rm follows
    await fs.rm(dir, { recursive: true, force: true, maxRetries: 3 });
  }
}
