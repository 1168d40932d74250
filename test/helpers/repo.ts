import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { packDirectory } from '../../cmp/tar/pack.js';

/** A temp directory with the given files (path → content); `mode` entries set permission bits. */
export function makeRepo(files: Record<string, string>, modes: Record<string, number> = {}): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-repo-'));
  for (const [rel, content] of Object.entries(files)) {
    const p = path.join(dir, rel);
    fs.mkdirSync(path.dirname(p), { recursive: true });
    fs.writeFileSync(p, content);
  }
  for (const [rel, mode] of Object.entries(modes)) fs.chmodSync(path.join(dir, rel), mode);
  return dir;
}

/** Pack a directory exactly as the repo-server does, into memory. */
export async function packRepo(dir: string, exclusions: string[] = []): Promise<Buffer> {
  const out = new PassThrough();
  const parts: Buffer[] = [];
  out.on('data', (b: Buffer) => parts.push(b));
  await packDirectory(dir, { exclusions, out });
  out.end();
  return Buffer.concat(parts);
}

/** makeRepo + packRepo, removing the directory afterwards. */
export async function tarballOf(files: Record<string, string>, modes: Record<string, number> = {}): Promise<Buffer> {
  const dir = makeRepo(files, modes);
  try {
    return await packRepo(dir);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
