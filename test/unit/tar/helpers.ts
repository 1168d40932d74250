import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { extractTgz } from '../../../cmp/tar/extract.js';
import { CmpError } from '../../../cmp/errors.js';

/** A fresh real temp dir (realpath'd), removed after `fn`. */
export async function withTmp<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-tar-test-')));
  try {
    return await fn(dir);
  } finally {
    fs.chmodSync(dir, 0o755);
    for (const p of walkDirs(dir)) fs.chmodSync(p, 0o755);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function walkDirs(dir: string): string[] {
  const out: string[] = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    if (e.isDirectory()) {
      const p = path.join(dir, e.name);
      try {
        fs.chmodSync(p, 0o755);
        out.push(p, ...walkDirs(p));
      } catch {
        // not ours to fix
      }
    }
  }
  return out;
}

export interface Extracted {
  /** The extraction root D (exists, empty before extraction). */
  dest: string;
  files?: number;
  bytes?: number;
  /** The error text, when extraction failed. */
  error?: string;
  code?: number;
  /** Which of our errors it was, if one (CmpError.kind). */
  kind?: string;
}

export const NO_LIMITS = { maxExtractedBytes: Number.MAX_SAFE_INTEGER, maxEntries: Number.MAX_SAFE_INTEGER };

/** Writes `tgz` under `dir`, extracts it into `dir/D`, reports the outcome. */
export async function extractBytes(
  dir: string,
  tgz: Buffer,
  opts: Partial<{ preserveFileMode: boolean; maxExtractedBytes: number; maxEntries: number; sha256: string }> = {},
): Promise<Extracted> {
  const tgzPath = path.join(dir, `in-${Math.random().toString(36).slice(2)}.tgz`);
  fs.writeFileSync(tgzPath, tgz);
  const dest = path.join(dir, 'D');
  fs.mkdirSync(dest, { recursive: true });
  try {
    const r = await extractTgz(tgzPath, dest, { preserveFileMode: false, ...NO_LIMITS, ...opts });
    return { dest, ...r };
  } catch (err) {
    if (!(err instanceof CmpError)) throw err;
    return { dest, error: err.message, code: err.code, ...(err.kind ? { kind: err.kind } : {}) };
  }
}

/** Every path under `dir` (relative, sorted) with its type and, for links, target. */
export function listTree(dir: string): string[] {
  const out: string[] = [];
  const visit = (rel: string) => {
    for (const name of fs.readdirSync(path.join(dir, rel)).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      const st = fs.lstatSync(path.join(dir, r));
      if (st.isSymbolicLink()) out.push(`${r} -> ${fs.readlinkSync(path.join(dir, r))}`);
      else if (st.isDirectory()) {
        out.push(`${r}/`);
        visit(r);
      } else out.push(r);
    }
  };
  visit('');
  return out;
}

export function modeOf(p: string): number {
  return fs.lstatSync(p).mode & 0o7777;
}
