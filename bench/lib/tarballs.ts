import { createHash, randomFillSync } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import zlib from 'node:zlib';
import { headerBlock } from '../../test/helpers/tar-builder.js';
import { MiB } from './stats.js';
import { rng } from '../../test/helpers/rng.js';
import { TextGen } from './text.js';
import { monorepoFiles } from '../../test/helpers/monorepo.js';

/** A generated tarball on disk. */
export interface Tarball {
  path: string;
  /** Gzip bytes. */
  size: number;
  sha256: string;
  /** Tar bytes before gzip. */
  rawBytes: number;
  files: number;
}

/** A tar entry; a large file's content comes as `size` + pieces so that it is never whole in memory. */
type Entry = { name: string; dir?: boolean; content?: Buffer; stream?: { size: number; pieces: () => Iterable<Buffer> } };

function* tarBlocks(entries: Iterable<Entry>): Generator<Buffer> {
  for (const e of entries) {
    const size = e.stream?.size ?? e.content?.length ?? 0;
    yield headerBlock({ name: e.name, typeflag: e.dir ? '5' : '0', size, mode: e.dir ? 0o755 : 0o644 });
    if (e.stream) yield* e.stream.pieces();
    else if (e.content) yield e.content;
    if (size % 512) yield Buffer.alloc(512 - (size % 512));
  }
  yield Buffer.alloc(1024);
}

/**
 * Write the entries as a gzipped tar, streaming (never the whole tarball in memory), unless a
 * tarball of the same name and recipe is cached in `dir` from an earlier run.
 */
async function writeTgz(dir: string, name: string, recipe: string, entries: () => Iterable<Entry>, level = 6): Promise<Tarball> {
  const file = path.join(dir, `${name}.tgz`);
  const meta = `${file}.json`;
  if (fs.existsSync(file) && fs.existsSync(meta)) {
    const cached = JSON.parse(fs.readFileSync(meta, 'utf8')) as Tarball & { recipe: string };
    if (cached.recipe === recipe && fs.statSync(file).size === cached.size) return { ...cached, path: file };
  }
  fs.mkdirSync(dir, { recursive: true });
  const hash = createHash('sha256');
  let rawBytes = 0;
  let files = 0;
  let size = 0;
  const counted = function* () {
    const all = entries();
    const counting = function* () {
      for (const e of all) {
        if (!e.dir) files++;
        yield e;
      }
    };
    // Batched: many small writes into gzip cost more than the compression.
    let batch: Buffer[] = [];
    let batched = 0;
    for (const b of tarBlocks(counting())) {
      rawBytes += b.length;
      batch.push(b);
      batched += b.length;
      if (batched >= MiB) {
        yield Buffer.concat(batch);
        batch = [];
        batched = 0;
      }
    }
    if (batch.length) yield Buffer.concat(batch);
  };
  const gzip = zlib.createGzip({ level });
  gzip.on('data', (b: Buffer) => {
    hash.update(b);
    size += b.length;
  });
  await pipeline(Readable.from(counted()), gzip, fs.createWriteStream(file));
  const t: Tarball = { path: file, size, sha256: hash.digest('hex'), rawBytes, files };
  fs.writeFileSync(meta, JSON.stringify({ ...t, recipe }));
  return t;
}

/**
 * A repository-like tarball: source-like text files (~6:1 gzip ratio) of 1–48 KiB in nested
 * directories, `rawBytes` of content in all.
 */
export function textTarball(dir: string, name: string, rawBytes: number, seed = 1): Promise<Tarball> {
  return writeTgz(dir, name, `text:${rawBytes}:${seed}`, function* () {
    const rand = rng(seed);
    const slice = corpusSlicer(rand);
    let written = 0;
    for (let d = 0; written < rawBytes; d++) {
      const dirName = `src/module-${d}/`;
      yield { name: dirName, dir: true };
      for (let f = 0; f < 50 && written < rawBytes; f++) {
        const content = slice(1024 + Math.floor(rand() * 47 * 1024));
        written += content.length;
        yield { name: `${dirName}file-${f}.yaml`, content };
      }
    }
  });
}

/**
 * File contents cut at random places from 8 MiB of generated text: generating every byte is
 * slow, and slices far apart in the corpus compress like fresh text (gzip's window is 32 KiB).
 */
function corpusSlicer(rand: () => number): (bytes: number) => Buffer {
  const corpus = Buffer.from(new TextGen(rand).text(8 * MiB));
  return bytes => {
    const n = Math.min(bytes, corpus.length);
    const start = Math.floor(rand() * (corpus.length - n));
    return corpus.subarray(start, start + n);
  };
}

/** One file of random bytes (gzip cannot shrink it), level 1 to keep generation quick. */
export function randomTarball(dir: string, name: string, contentBytes: number): Promise<Tarball> {
  return writeTgz(
    dir,
    name,
    `random:${contentBytes}`,
    function* () {
      yield { name: 'big.bin', stream: { size: contentBytes, pieces: () => randomPieces(contentBytes) } };
    },
    1,
  );
}

function* randomPieces(n: number): Generator<Buffer> {
  for (let left = n; left > 0; left -= MiB) yield randomFillSync(Buffer.allocUnsafe(Math.min(MiB, left)));
}

/** `files` small text files (≈ `avgBytes` each) in directories of 100: an extraction workload. */
export function treeTarball(dir: string, name: string, files: number, avgBytes: number, seed = 2): Promise<Tarball> {
  return writeTgz(dir, name, `tree:${files}:${avgBytes}:${seed}`, function* () {
    const rand = rng(seed);
    const slice = corpusSlicer(rand);
    for (let f = 0; f < files; f++) {
      if (f % 100 === 0) yield { name: `apps/app-${f / 100}/`, dir: true };
      yield { name: `apps/app-${Math.floor(f / 100)}/file-${f % 100}.yaml`, content: slice(Math.floor(avgBytes * (0.5 + rand()))) };
    }
  });
}

/**
 * A monorepo as Argo sends it whole for every Application: the apps of test/helpers/monorepo.ts
 * (`apps/aNN/`, a shared `base/`, docs), vendored YAML-like text (~6:1) in directories of 50
 * files of 1–48 KiB, and binary assets of 16–512 KiB (images, archives: gzip cannot shrink them)
 * making about `binaryShare` of the gzip bytes; about `compressedBytes` in all.
 */
export function monorepoTarball(dir: string, name: string, compressedBytes: number, apps: number, binaryShare = 0.35): Promise<Tarball> {
  const binaryBytes = compressedBytes * binaryShare;
  // Text gzips about 6:1 (see TextGen).
  const textBytes = (compressedBytes - binaryBytes) * 6;
  return writeTgz(dir, name, `monorepo:${compressedBytes}:${apps}:${binaryShare}`, function* () {
    const rand = rng(apps);
    const slice = corpusSlicer(rand);
    const dirs = new Set<string>();
    /** The file, after those of its directories not written yet, as `tar -c` lists them. */
    const file = (name: string, content: Buffer): Entry[] => {
      const out: Entry[] = [];
      for (let end = name.indexOf('/'); end > 0; end = name.indexOf('/', end + 1)) {
        const parent = name.slice(0, end + 1);
        if (dirs.has(parent)) continue;
        dirs.add(parent);
        out.push({ name: parent, dir: true });
      }
      out.push({ name, content });
      return out;
    };
    for (const [name, text] of Object.entries(monorepoFiles(apps))) yield* file(name, Buffer.from(text));
    let text = 0;
    let binary = 0;
    for (let i = 0; text < textBytes || binary < binaryBytes; i++) {
      // Interleaved, as a repository's directories mix both.
      if (binary < (binaryBytes * text) / textBytes || text >= textBytes) {
        const size = (16 + Math.floor(rand() * 496)) * 1024;
        binary += size;
        yield* file(`assets/group-${Math.floor(i / 200)}/asset-${i}.bin`, randomFillSync(Buffer.allocUnsafe(size)));
      } else {
        const content = slice(1024 + Math.floor(rand() * 47 * 1024));
        text += content.length;
        yield* file(`vendor/module-${Math.floor(i / 50)}/file-${i % 50}.yaml`, content);
      }
    }
  });
}
