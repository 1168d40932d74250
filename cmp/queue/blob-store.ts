import { createHash, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import type { RedisClient } from './redis-connection.js';
import { CmpError, OUR_ERRORS } from '../errors.js';
import type { KeySpace } from './keys.js';

/** Chunk of an upload or download: memory stays at one chunk whatever the tarball size. */
const CHUNK_BYTES = 1024 * 1024;

/**
 * Store a tarball (in memory, or spooled at a path) as the blob of its sha256, unless that blob
 * exists already (then its TTL is refreshed and nothing is sent). A spooled one streams from
 * disk in chunks into a key of this upload alone, which is renamed into place at the end: concurrent uploads of the same
 * content never interleave, and a blob is never seen half-written. Returns whether it uploaded.
 */
export async function storeBlob(redis: RedisClient, keys: KeySpace, sha256: string, tgz: string | Uint8Array, ttlMs: number): Promise<boolean> {
  const key = keys.blob(sha256);
  if ((await redis.pexpire(key, ttlMs)) === 1) return false;
  // A tarball in memory is one SET: never seen half-written either.
  if (typeof tgz !== 'string') {
    await redis.set(key, Buffer.from(tgz.buffer, tgz.byteOffset, tgz.byteLength), 'PX', ttlMs);
    return true;
  }
  const upload = keys.blobUpload(sha256, randomUUID());
  try {
    let first = true;
    const stream = fs.createReadStream(tgz, { highWaterMark: CHUNK_BYTES });
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      if (first) await redis.set(upload, chunk, 'PX', ttlMs);
      else await redis.append(upload, chunk);
      first = false;
    }
    // An empty tarball still needs a (valid, empty) blob.
    if (first) await redis.set(upload, Buffer.alloc(0), 'PX', ttlMs);
    await redis.rename(upload, key);
  } catch (err) {
    await redis.del(upload).catch(() => {}); // the upload key expires anyway; err is the one to report
    throw err;
  }
  return true;
}

/** A blob that expired or never existed: retrying cannot help, the proxy must send it again. */
export class BlobMissingError extends CmpError {
  constructor(sha256: string) {
    const { code, text } = OUR_ERRORS.blobExpired;
    super(text(sha256), code);
  }
}

/** A blob whose bytes are not those of its name; it has been removed from Redis (see fetchBlob). */
export class BlobCorruptError extends CmpError {
  constructor(sha256: string, detail: string) {
    const { code, text } = OUR_ERRORS.blobCorrupt;
    super(text(sha256, detail), code);
  }
}

/**
 * Remove a blob found corrupt. Uploads skip a blob that exists, so a corrupt one would block its
 * content until it expires; without it, the proxy's next submission uploads the content again.
 * (Should a good copy have replaced it meanwhile, it goes too, and the next job that needs it is
 * submitted anew as for any vanished blob.)
 */
async function dropCorrupt(redis: RedisClient, key: string, sha256: string, detail: string): Promise<never> {
  await redis.del(key).catch(() => {}); // best effort: the blob expires, and its reader resubmits anyway
  throw new BlobCorruptError(sha256, detail);
}

/**
 * Copy a blob to `destPath` (mode 0600) in chunks, checking its size and sha256 against what
 * the signed job says: a tampered blob is refused, as the checksum check of ingest would, and
 * removed (BlobCorruptError). A blob that is not there throws BlobMissingError.
 */
export async function fetchBlob(redis: RedisClient, keys: KeySpace, sha256: string, size: number, destPath: string): Promise<void> {
  const key = keys.blob(sha256);
  const actual = await redis.strlen(key);
  if (actual === 0 && !(await redis.exists(key))) throw new BlobMissingError(sha256);
  if (actual !== size) await dropCorrupt(redis, key, sha256, `has ${actual} bytes, expected ${size}`);
  const hash = createHash('sha256');
  const out = fs.createWriteStream(destPath, { mode: 0o600 });
  const closed = new Promise<void>((resolve, reject) => {
    out.once('close', resolve);
    out.once('error', reject);
  });
  try {
    for (let offset = 0; offset < size; offset += CHUNK_BYTES) {
      const end = Math.min(offset + CHUNK_BYTES, size) - 1;
      const chunk = await redis.getrangeBuffer(key, offset, end);
      if (chunk.length !== end - offset + 1) throw new BlobMissingError(sha256);
      hash.update(chunk);
      if (!out.write(chunk)) await new Promise<void>(resolve => out.once('drain', () => resolve()));
    }
  } finally {
    out.end();
    await closed;
  }
  if (hash.digest('hex') !== sha256) await dropCorrupt(redis, key, sha256, 'does not match its checksum');
}
