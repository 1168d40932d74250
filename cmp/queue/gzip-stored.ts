import { promisify } from 'node:util';
import zlib from 'node:zlib';

const gunzipAsync = promisify(zlib.gunzip);
const gzipAsync = promisify(zlib.gzip);

/** A payload this small is inflated (or deflated) on the event loop: a thread-pool round trip costs more. */
const SYNC_BYTES = 16 * 1024;

/** Deflate a record's payload for storage; a larger one in the thread pool, off the event loop. */
export function gzipStored(payload: Buffer): Promise<Buffer> {
  if (payload.length > SYNC_BYTES) return gzipAsync(payload);
  try {
    return Promise.resolve(zlib.gzipSync(payload));
  } catch (err) {
    return Promise.reject(err);
  }
}

/** Inflate a stored record's gzip payload; a larger one in the thread pool, off the event loop. */
export function gunzipStored(payload: Buffer, maxOutputLength?: number): Promise<Buffer> {
  const opts = maxOutputLength === undefined ? {} : { maxOutputLength };
  if (payload.length > SYNC_BYTES) return gunzipAsync(payload, opts);
  try {
    return Promise.resolve(zlib.gunzipSync(payload, opts));
  } catch (err) {
    return Promise.reject(err);
  }
}
