import { createHash } from 'node:crypto';
import fs from 'node:fs';
import { CmpError, ourError } from '../errors.js';
import { goQuote } from '../go/go-quote.js';
import { errnoCode, goLinkErrorText, goPathErrorText } from '../go/go-errno.js';
import { EvalSymlinksError, goEvalSymlinks } from '../go/go-eval-symlinks.js';
import { goDir, goJoin, goRel, inbound } from '../go/go-path.js';
import type { TarHeader, TarVisitor } from '../go/go-tar-reader.js';
import type { TarLimits } from './tar-limits.js';
import { TgzStream } from './tgz-stream.js';

export interface UntgzOptions extends TarLimits {
  preserveFileMode: boolean;
  /**
   * The tarball's verified sha256, when the file may have been written since it was verified
   * (the proxy's shared copies live where standalone plugin commands, same uid, can reach them):
   * every byte read is hashed, and a mismatch fails the extraction, whatever else went wrong.
   */
  sha256?: string;
}

export interface UntgzResult {
  files: number;
  bytes: number;
}

const READ_CHUNK = 256 * 1024;
const { O_RDWR, O_CREAT, O_TRUNC } = fs.constants;

/**
 * Argo's `Untgz` (util/io/files/tar.go), synchronously: every rule, mode and error text of
 * docs/argo-contract.md#extraction. Meant to run in a worker thread (see extract.ts).
 *
 * One hardening beyond Argo: Argo relativises a symlink from the *lexical* directory of the
 * link, so a link created under an earlier in-tree symlink to a shallower directory can point
 * outside the tree, and a later file entry would write through it. Once the extraction has
 * created any symlink, the physical place of every operation is checked as well; an escaping
 * one fails with Argo's own `illegal filepath in archive/symlink` texts.
 */
export function untgzSync(tgzPath: string, dest: string, opts: UntgzOptions): UntgzResult {
  if (!dest.startsWith('/')) throw new CmpError(`dstPath points to a relative path: ${dest}`);
  const untgz = new Untgz(dest, opts.preserveFileMode);
  const stream = new TgzStream(untgz, opts);
  const fd = fs.openSync(tgzPath, 'r');
  const buf = Buffer.allocUnsafe(READ_CHUNK);
  const hash = opts.sha256 === undefined ? undefined : createHash('sha256');
  const read = (): number => {
    const n = fs.readSync(fd, buf, 0, buf.length, null);
    hash?.update(buf.subarray(0, n));
    return n;
  };
  try {
    try {
      for (;;) {
        const n = read();
        if (n === 0) break;
        stream.push(buf.subarray(0, n));
        if (stream.done) break;
      }
      stream.finish();
    } finally {
      // Hashed to the end even when the extraction failed: changed bytes explain a tar error.
      if (hash) {
        while (read() > 0);
        if (hash.digest('hex') !== opts.sha256) throw ourError('spoolChanged', opts.sha256!);
      }
    }
  } finally {
    stream.close();
    untgz.closeFile();
    fs.closeSync(fd);
  }
  return { files: untgz.files, bytes: untgz.bytes };
}

class Untgz implements TarVisitor {
  files = 0;
  bytes = 0;
  private fd: number | undefined;
  private target = '';
  /** Lexical directory paths known to be directories (nothing is ever removed or replaced). */
  private readonly dirs = new Set<string>();
  private linked = false;
  private realDest: string | undefined;

  constructor(
    private readonly dest: string,
    private readonly preserveFileMode: boolean,
  ) {}

  entry(h: TarHeader): boolean {
    if (h.name === '.' || h.name === './') return false;
    const target = goJoin(this.dest, h.name);
    if (!inbound(target, this.dest)) throw new CmpError(`illegal filepath in archive: ${target}`);
    switch (h.typeflag) {
      case '5':
        this.guardPhysical(target, target);
        this.mkdirAllOrFail(target, this.preserveFileMode ? h.mode & 0o777 : 0o755);
        return false;
      case '2':
        this.symlink(target, h.linkname);
        return false;
      case '0':
        this.openFile(target, this.preserveFileMode ? h.mode & 0o777 : 0o644);
        return true;
      default:
        return false;
    }
  }

  data(chunk: Buffer): void {
    let off = 0;
    while (off < chunk.length) {
      try {
        off += fs.writeSync(this.fd!, chunk, off, chunk.length - off);
      } catch (err) {
        throw new CmpError(`error writing tgz file: ${goPathErrorText('write', this.target, err)}`);
      }
    }
    this.bytes += chunk.length;
  }

  end(): void {
    this.closeFile();
    this.files++;
  }

  closeFile(): void {
    if (this.fd !== undefined) fs.closeSync(this.fd);
    this.fd = undefined;
  }

  private openFile(target: string, mode: number): void {
    const parent = goDir(target);
    this.guardPhysical(target, parent);
    this.mkdirAllOrFail(parent, 0o755);
    if (this.linked) this.guardWriteThrough(target);
    try {
      this.fd = fs.openSync(target, O_RDWR | O_CREAT | O_TRUNC, mode);
    } catch (err) {
      throw new CmpError(`error creating file ${goQuote(target)}: ${goPathErrorText('open', target, err)}`);
    }
    this.target = target;
  }

  private symlink(target: string, linkname: string): void {
    const dir = goDir(target);
    const linkTarget = goJoin(dir, linkname);
    let real: string;
    try {
      real = goEvalSymlinks(linkTarget);
    } catch (err) {
      if (!(err instanceof EvalSymlinksError)) throw err;
      if (!err.notExist) throw new CmpError(`error checking symlink realpath: ${err.message}`);
      real = linkTarget;
    }
    if (!inbound(real, this.dest)) throw new CmpError(`illegal filepath in symlink: ${linkTarget}`);
    const rel = goRel(dir, real);
    if (this.linked) {
      // Where the link will really live, and what its relative target will really reach.
      const physicalDir = this.physical(dir);
      const reached = physicalDir === undefined ? undefined : this.physical(goJoin(physicalDir, rel));
      if (reached !== undefined && !inbound(reached, this.realDestination())) {
        throw new CmpError(`illegal filepath in symlink: ${linkTarget}`);
      }
    }
    try {
      fs.symlinkSync(rel, target);
    } catch (err) {
      throw new CmpError(`error creating symlink: ${goLinkErrorText('symlink', rel, target, err)}`);
    }
    this.linked = true;
  }

  private mkdirAllOrFail(p: string, mode: number): void {
    try {
      this.mkdirAll(p, mode);
    } catch (err) {
      throw new CmpError(`error creating nested folders: ${(err as Error).message}`);
    }
  }

  /** Go's os.MkdirAll, with a cache of paths already known to be directories. */
  private mkdirAll(p: string, mode: number): void {
    if (this.dirs.has(p)) return;
    let st: fs.Stats | undefined;
    try {
      st = fs.statSync(p);
    } catch {
      st = undefined; // not there yet: made below
    }
    if (st) {
      if (st.isDirectory()) {
        this.dirs.add(p);
        return;
      }
      throw new Error(goPathErrorText('mkdir', p, { code: 'ENOTDIR' }));
    }
    let i = p.length - 1;
    while (i >= 0 && p[i] === '/') i--;
    while (i >= 0 && p[i] !== '/') i--;
    const parent = p.slice(0, Math.max(i, 0));
    if (parent.length > 0) this.mkdirAll(parent, mode);
    try {
      fs.mkdirSync(p, mode);
    } catch (err) {
      let isDir = false;
      try {
        isDir = fs.lstatSync(p).isDirectory();
      } catch {
        isDir = false; // not there either: mkdir's own error is reported
      }
      if (!isDir) throw new Error(goPathErrorText('mkdir', p, err));
    }
    this.dirs.add(p);
  }

  private realDestination(): string {
    this.realDest ??= fs.realpathSync(this.dest);
    return this.realDest;
  }

  /** Physical resolution of `p` (missing tail appended lexically); undefined when unresolvable. */
  private physical(p: string): string | undefined {
    try {
      return goEvalSymlinks(p, true);
    } catch {
      // Unresolvable (loop, not a directory…): the operation itself fails with Go's error.
      return undefined;
    }
  }

  /** Once symlinks exist, `dir` must really be inside the destination (or be it). */
  private guardPhysical(target: string, dir: string): void {
    if (!this.linked) return;
    const real = this.physical(dir);
    const root = this.realDestination();
    if (real !== undefined && real !== root && !inbound(real, root)) {
      throw new CmpError(`illegal filepath in archive: ${target}`);
    }
  }

  /** Writing through an existing symlink is Argo's behaviour; it must not leave the tree. */
  private guardWriteThrough(target: string): void {
    let isLink = false;
    try {
      isLink = fs.lstatSync(target).isSymbolicLink();
    } catch (err) {
      if (errnoCode(err) !== 'ENOENT') return;
    }
    if (!isLink) return;
    const real = this.physical(target);
    if (real !== undefined && !inbound(real, this.realDestination())) {
      throw new CmpError(`illegal filepath in archive: ${target}`);
    }
  }
}
