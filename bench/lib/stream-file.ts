import fs from 'node:fs';
import type { AppStreamRequest } from '../../proto/generated/cmpserver/plugin/plugin.js';
import type { Tarball } from './tarballs.js';

/**
 * The messages the repo-server sends for a tarball on disk: metadata, then `chunkBytes` pieces
 * read from the file (never the whole tarball in memory).
 */
export async function* tarballMessages(
  t: Tarball,
  chunkBytes: number,
  meta: { appName?: string; appRelPath?: string } = {},
): AsyncGenerator<AppStreamRequest> {
  yield { metadata: { appName: meta.appName ?? 'bench', appRelPath: meta.appRelPath ?? '.', checksum: t.sha256, size: t.size, env: [] } };
  for await (const block of fs.createReadStream(t.path, { highWaterMark: 1024 * 1024 }) as AsyncIterable<Buffer>) {
    for (let off = 0; off < block.length; off += chunkBytes) yield { file: { chunk: block.subarray(off, off + chunkBytes) } };
  }
}
