import fs from 'node:fs/promises';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';

/**
 * grpc-js logs "No address added out of total N resolved" itself before it rejects a bind, once
 * per process that tried (the coordinator and each ingest process). The proxy says why in one
 * line of its own (listenFailure), so that line alone is dropped; every other grpc-js line is
 * written as grpc-js's default logger writes it.
 */
export function dropGrpcBindNoise(): void {
  grpc.setLogger({
    error: (message?: unknown, ...rest: unknown[]) => {
      if (!String(message).startsWith('No address added out of total')) console.error(`E ${String(message)}`, ...rest);
    },
    info: (message?: unknown, ...rest: unknown[]) => console.error(`I ${String(message)}`, ...rest),
    debug: (message?: unknown, ...rest: unknown[]) => console.error(`D ${String(message)}`, ...rest),
  });
}

/**
 * The line a proxy that cannot listen prints: the socket, the cause in words (found by looking at
 * the directory, since grpc-js wraps the system error in its own text) and the setting to fix.
 */
export async function listenFailure(socketPath: string, err: unknown): Promise<string> {
  const dir = path.dirname(socketPath);
  let why: string;
  try {
    const st = await fs.stat(dir);
    if (!st.isDirectory()) why = 'not a directory';
    else why = (await canWrite(dir)) ? systemErrors(err) : 'permission denied';
  } catch (e) {
    why = (e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such directory' : (e as Error).message;
  }
  return `failed to listen on ${socketPath}: ${why} (ARGOCD_PLUGINSOCKFILEPATH=${dir} must be an existing directory the proxy can write)`;
}

/** grpc-js words it `No address added ... errors: [listen EADDRINUSE: ...]`: the bracketed part. */
function systemErrors(err: unknown): string {
  const message = (err as Error)?.message ?? String(err);
  return /errors: \[(.+)\]$/s.exec(message)?.[1] ?? message;
}

/** False when this process may not create a file in dir (access(2) answers for our uid). */
async function canWrite(dir: string): Promise<boolean> {
  try {
    await fs.access(dir, fs.constants.W_OK | fs.constants.X_OK);
    return true;
  } catch {
    return false; // the answer: access(2) refused (or no such dir)
  }
}
