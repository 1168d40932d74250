import { lstat, readdir, stat } from 'node:fs/promises';

/** What the glob engines need to know about one path. */
export interface GlobStat {
  isDir: boolean;
  isSymlink: boolean;
}

/**
 * The slice of a filesystem both glob engines use, so discovery can run against the real disk
 * or against a tree index built from a tarball without extracting it. Paths are absolute POSIX.
 * "Missing" (ENOENT, ENOTDIR) is `undefined`; any other failure is thrown as an Error whose
 * message reads like Go's `*PathError` (`stat /x: permission denied`).
 */
export interface GlobFs {
  /** Does not follow a symlink at `p`. */
  lstat(p: string): Promise<GlobStat | undefined>;
  /** Follows symlinks (a broken link is missing). */
  stat(p: string): Promise<GlobStat | undefined>;
  /** Entry names of the directory at `p` (following a symlink at `p`), in any order. */
  readdir(p: string): Promise<string[] | undefined>;
}

// Linux strerror texts as Go's syscall.Errno prints them.
const ERRNO_TEXT: Record<string, string> = {
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  ELOOP: 'too many levels of symbolic links',
  ENAMETOOLONG: 'file name too long',
  EIO: 'input/output error',
  EMFILE: 'too many open files',
  ENFILE: 'too many open files in system',
  ENOENT: 'no such file or directory',
  ENOTDIR: 'not a directory',
};

/** Go's `&PathError{Op, Path, Err}.Error()` for a Node fs error. */
export function goPathError(op: string, p: string, err: unknown): Error {
  const code = (err as NodeJS.ErrnoException | undefined)?.code ?? '';
  const text = ERRNO_TEXT[code] ?? (err instanceof Error ? err.message : String(err));
  return new Error(`${op} ${p}: ${text}`);
}

function isMissing(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}

async function statVia(fn: typeof stat, op: string, p: string): Promise<GlobStat | undefined> {
  try {
    const s = await fn(p);
    return { isDir: s.isDirectory(), isSymlink: s.isSymbolicLink() };
  } catch (err) {
    if (isMissing(err)) return undefined;
    throw goPathError(op, p, err);
  }
}

/** The real disk. */
export const realFs: GlobFs = {
  lstat: p => statVia(lstat, 'lstat', p),
  stat: p => statVia(stat, 'stat', p),
  async readdir(p) {
    try {
      return await readdir(p);
    } catch (err) {
      if (isMissing(err)) return undefined;
      throw goPathError('open', p, err);
    }
  },
};

// Maps UTF-16 code units so that comparing them orders strings by code point, which is the
// order of their UTF-8 bytes (Go's sort.Strings): surrogates must sort above U+E000..U+FFFF.
function codePointRank(u: number): number {
  if (u >= 0xd800 && u <= 0xdfff) return u + 0x2000;
  return u >= 0xe000 ? u - 0x800 : u;
}

/** Go's string ordering (UTF-8 byte order), for sorting names and matches like Go does. */
export function compareGoStrings(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return codePointRank(x) - codePointRank(y);
  }
  return a.length - b.length;
}
