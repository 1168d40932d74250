import { createHash } from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import { once } from 'node:events';
import zlib from 'node:zlib';
import { goMatch } from '../go/filepath-glob.js';
import { compareGoStrings } from '../go/glob-fs.js';
import { goQuote } from '../go/go-quote.js';
import { goPathErrorText } from '../go/go-errno.js';
import { goJoin, goRel } from '../go/go-path.js';
import { encodeHeader, END_OF_ARCHIVE, padding, type WriteHeader } from '../go/go-tar-writer.js';

export interface PackOptions {
  /** Go filepath.Match globs against the path relative to root (Argo's --plugin-tar-exclude). */
  exclusions?: string[];
  /** A file path to create, or a stream to write into (left open). */
  out: NodeJS.WritableStream | string;
}

export interface PackResult {
  /** Hex sha256 of the gzip bytes (the metadata checksum). */
  sha256: string;
  size: number;
  /** Regular files written. */
  filesWritten: number;
}

const SMALL_FILE = 1 << 20;
const READ_CHUNK = 64 * 1024;

/**
 * Packs `root` the way argocd-repo-server does (docs/argo-contract.md#the-tarball-the-repo-server-sends): Go `filepath.Walk` in lexical
 * order without following symlinks, root entry `.`, regular files, directories and symlinks
 * (raw link target) only, exclusions pruning matching directories, Go tar headers (USTAR, PAX
 * when needed), one gzip member at the default level. Streams: memory stays bounded.
 * Throws `no files to send(<root>)` when no regular file was written.
 */
export async function packDirectory(root: string, opts: PackOptions): Promise<PackResult> {
  try {
    await fsp.stat(root);
  } catch (err) {
    throw new Error(`error inspecting srcPath ${goQuote(root)}: ${goPathErrorText('stat', root, err)}`);
  }
  const out = typeof opts.out === 'string' ? fs.createWriteStream(opts.out) : opts.out;
  const sink = new GzipSink(out);
  const packer = new Packer(root, opts.exclusions ?? [], sink, await NameLookup.load());
  try {
    await packer.walkRoot();
    await sink.write(END_OF_ARCHIVE);
    await sink.end();
    if (typeof opts.out === 'string') {
      (out as fs.WriteStream).end();
      await once(out, 'close');
    }
  } catch (err) {
    sink.destroy();
    if (typeof opts.out === 'string') (out as fs.WriteStream).destroy();
    throw err;
  }
  if (packer.filesWritten === 0) throw new Error(`no files to send(${root})`);
  return { sha256: sink.hash.digest('hex'), size: sink.size, filesWritten: packer.filesWritten };
}

/** gzip → (sha256, byte count, destination), with backpressure on both sides. */
class GzipSink {
  readonly hash = createHash('sha256');
  size = 0;
  private readonly gz = zlib.createGzip({ level: zlib.constants.Z_DEFAULT_COMPRESSION });
  private failure: Error | undefined;

  constructor(out: NodeJS.WritableStream) {
    this.gz.on('data', (chunk: Buffer) => {
      if (this.size === 0 && chunk.length >= 10) chunk[9] = 255; // Go writes OS "unknown"
      this.hash.update(chunk);
      this.size += chunk.length;
      if (!out.write(chunk)) {
        this.gz.pause();
        out.once('drain', () => this.gz.resume());
      }
    });
    this.gz.on('error', err => (this.failure = err));
    out.on('error', (err: Error) => (this.failure = err));
  }

  async write(buf: Buffer): Promise<void> {
    if (this.failure) throw this.failure;
    if (!this.gz.write(buf)) await once(this.gz, 'drain');
  }

  async end(): Promise<void> {
    const ended = once(this.gz, 'end');
    this.gz.end();
    await ended;
    if (this.failure) throw this.failure;
  }

  destroy(): void {
    this.gz.destroy();
  }
}

/** uid/gid → name, as Go's user.LookupId/LookupGroupId read them from /etc/passwd and /etc/group. */
class NameLookup {
  constructor(
    private readonly users: Map<number, string>,
    private readonly groups: Map<number, string>,
  ) {}

  static async load(): Promise<NameLookup> {
    const read = async (file: string) => {
      const names = new Map<number, string>();
      const text = await fsp.readFile(file, 'utf8').catch(() => ''); // no such file: ids stay numeric
      for (const line of text.split('\n')) {
        const [name, , id] = line.split(':');
        if (name && id !== undefined && /^\d+$/.test(id) && !names.has(Number(id))) names.set(Number(id), name);
      }
      return names;
    };
    return new NameLookup(await read('/etc/passwd'), await read('/etc/group'));
  }

  user(uid: number): string {
    return this.users.get(uid) ?? '';
  }

  group(gid: number): string {
    return this.groups.get(gid) ?? '';
  }
}

const SKIP_DIR = Symbol('SkipDir');

class Packer {
  filesWritten = 0;

  constructor(
    private readonly root: string,
    private readonly exclusions: string[],
    private readonly sink: GzipSink,
    private readonly names: NameLookup,
  ) {}

  async walkRoot(): Promise<void> {
    let st: fs.BigIntStats;
    try {
      st = await fsp.lstat(this.root, { bigint: true });
    } catch (err) {
      throw this.walkError(goPathErrorText('lstat', this.root, err));
    }
    await this.walk(this.root, st);
  }

  /** Go's filepath.walk: a directory's names are read (and sorted) before it is visited. */
  private async walk(p: string, st: fs.BigIntStats): Promise<typeof SKIP_DIR | undefined> {
    if (!st.isDirectory()) return this.visit(p, st);
    let names: string[];
    try {
      names = (await fsp.readdir(p)).sort(compareGoStrings);
    } catch (err) {
      throw this.walkError(goPathErrorText('open', p, err));
    }
    const skip = await this.visit(p, st);
    if (skip) return skip;
    for (const name of names) {
      const child = goJoin(p, name);
      let cst: fs.BigIntStats;
      try {
        cst = await fsp.lstat(child, { bigint: true });
      } catch (err) {
        throw this.walkError(goPathErrorText('lstat', child, err));
      }
      await this.walk(child, cst);
    }
    return undefined;
  }

  private walkError(text: string): Error {
    return new Error(`error walking in ${goQuote(this.root)}: ${text}`);
  }

  /** Argo's tgzFile. */
  private async visit(p: string, st: fs.BigIntStats): Promise<typeof SKIP_DIR | undefined> {
    const rel = goRel(this.root, p);
    for (const pattern of this.exclusions) {
      let found: boolean;
      try {
        found = goMatch(pattern, rel);
      } catch (err) {
        throw new Error(`error verifying exclusion pattern ${goQuote(pattern)}: ${(err as Error).message}`);
      }
      if (found) return st.isDirectory() ? SKIP_DIR : undefined;
    }
    const typeflag = st.isFile() ? '0' : st.isDirectory() ? '5' : st.isSymbolicLink() ? '2' : undefined;
    if (typeflag === undefined) return undefined;
    let linkname = '';
    if (typeflag === '2') {
      try {
        linkname = await fsp.readlink(p);
      } catch (err) {
        throw new Error(`error getting link target: ${goPathErrorText('readlink', p, err)}`);
      }
    }
    const uid = Number(st.uid);
    const gid = Number(st.gid);
    const size = typeflag === '0' ? Number(st.size) : 0;
    const header: WriteHeader = {
      name: rel,
      typeflag,
      linkname,
      mode: Number(st.mode) & 0o7777,
      uid,
      gid,
      uname: this.names.user(uid),
      gname: this.names.group(gid),
      size,
      mtime: Number((st.mtimeNs + 500_000_000n) / 1_000_000_000n),
    };
    await this.sink.write(encodeHeader(header));
    if (typeflag === '0') {
      await this.copyContent(p, size);
      this.filesWritten++;
    }
    return undefined;
  }

  private async copyContent(p: string, size: number): Promise<void> {
    const base = p.slice(p.lastIndexOf('/') + 1);
    let fh: fsp.FileHandle;
    try {
      fh = await fsp.open(p, 'r');
    } catch (err) {
      throw new Error(`error opening file ${goQuote(base)}: ${goPathErrorText('open', p, err)}`);
    }
    try {
      let copied = 0;
      const buf = Buffer.allocUnsafe(Math.min(Math.max(size, 1), size <= SMALL_FILE ? SMALL_FILE : READ_CHUNK) + 1);
      for (;;) {
        const { bytesRead } = await fh.read(buf, 0, buf.length, null);
        if (bytesRead === 0) break;
        if (copied + bytesRead > size) {
          throw new Error('error copying tgz file to writers: archive/tar: write too long');
        }
        await this.sink.write(Buffer.from(buf.subarray(0, bytesRead)));
        copied += bytesRead;
      }
      if (copied < size) throw new Error(`error writing header: archive/tar: missed writing ${size - copied} bytes`);
      await this.sink.write(padding(size));
    } finally {
      await fh.close();
    }
  }
}
