import { open } from 'node:fs/promises';
import { constants as bufferConstants } from 'node:buffer';
import type {
  AppStreamRequest,
  ConfigManagementPluginServiceClient,
  EnvEntry,
} from '../proto/generated/cmpserver/plugin/plugin.js';
import { callClientStream, type StreamingRpc, type StreamingRpcs } from './client-stream.js';
import type { RpcOutcome } from '../cmp/rpc-status.js';

export const DEFAULT_CMP_CHUNK_SIZE = 1024;

/** The file read size; a multiple of the chunk size so that chunks never straddle two reads. */
const READ_BLOCK_BYTES = 256 * 1024;

/**
 * ARGOCD_CMP_CHUNK_SIZE as the repo-server reads it: unset or not a Go `strconv.Atoi` integer ⇒
 * 1024. Zero and negative values, on which the Go client loops forever or panics, are refused
 * with an error here, as are sizes no Buffer can hold.
 */
export function cmpChunkSize(env: Record<string, string | undefined>): number {
  const raw = env.ARGOCD_CMP_CHUNK_SIZE;
  if (raw === undefined || raw === '' || !/^[+-]?\d+$/.test(raw)) return DEFAULT_CMP_CHUNK_SIZE;
  const n = Number(raw);
  if (n <= 0) throw new Error(`invalid ARGOCD_CMP_CHUNK_SIZE ${JSON.stringify(raw)}: must be a positive integer`);
  if (n > bufferConstants.MAX_LENGTH) {
    throw new Error(`invalid ARGOCD_CMP_CHUNK_SIZE ${JSON.stringify(raw)}: larger than ${bufferConstants.MAX_LENGTH}`);
  }
  return n;
}

export interface RepoStreamPayload {
  /** The gzip file to send. */
  tgzPath: string;
  /** Lower-case hex sha256 of the gzip bytes. */
  checksum: string;
  /** Byte size of the gzip file. */
  size: number;
  appRelPath: string;
  appName: string;
  env: EnvEntry[];
}

export interface RepoStreamOptions {
  chunkSize: number;
  /** Absolute deadline, ms since epoch. */
  deadline?: number;
}

/**
 * Send one repository the way the repo-server's cmp.SendRepoStream does (docs/argo-contract.md#the-repo-stream): one
 * metadata message, the file in `chunkSize` chunks (only the last one shorter), half-close, then
 * the single response or the status. Memory stays bounded by the call's write backpressure.
 */
export async function sendRepoStream<R extends StreamingRpc>(
  client: ConfigManagementPluginServiceClient,
  rpc: R,
  payload: RepoStreamPayload,
  options: RepoStreamOptions,
): Promise<RpcOutcome<StreamingRpcs[R]>> {
  if (!Number.isSafeInteger(options.chunkSize) || options.chunkSize <= 0) {
    throw new Error(`chunk size must be a positive integer, got ${options.chunkSize}`);
  }
  return callClientStream(client, rpc, repoMessages(payload, options.chunkSize), { deadline: options.deadline });
}

async function* repoMessages(payload: RepoStreamPayload, chunkSize: number): AsyncGenerator<AppStreamRequest> {
  const { tgzPath, checksum, size, appRelPath, appName, env } = payload;
  yield { metadata: { appName, appRelPath, checksum, size, env } };
  for await (const chunk of fileChunks(tgzPath, chunkSize)) yield { file: { chunk } };
}

/** The file's bytes in pieces of exactly `chunkSize`, except a shorter last one; nothing for an empty file. */
export async function* fileChunks(filePath: string, chunkSize: number): AsyncGenerator<Buffer> {
  const blockSize = chunkSize >= READ_BLOCK_BYTES ? chunkSize : Math.floor(READ_BLOCK_BYTES / chunkSize) * chunkSize;
  const fh = await open(filePath, 'r');
  try {
    for (;;) {
      // A fresh block per read: the chunks handed out are views into it and may still be queued.
      const block = Buffer.allocUnsafe(blockSize);
      let filled = 0;
      while (filled < blockSize) {
        const { bytesRead } = await fh.read(block, filled, blockSize - filled, null);
        if (bytesRead === 0) break;
        filled += bytesRead;
      }
      for (let off = 0; off < filled; off += chunkSize) yield block.subarray(off, Math.min(off + chunkSize, filled));
      if (filled < blockSize) return;
    }
  } finally {
    await fh.close();
  }
}
