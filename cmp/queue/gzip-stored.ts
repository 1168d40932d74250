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

/**
 * What a small payload may inflate to on the event loop: a result is plugin output, and 16 KiB of
 * gzip can hold megabytes of it. Past this the inflate starts again in the thread pool.
 */
const SYNC_OUTPUT_BYTES = 256 * 1024;

/** Inflate a stored record's gzip payload; a larger one in the thread pool, off the event loop. */
export function gunzipStored(payload: Buffer, maxOutputLength?: number): Promise<Buffer> {
  const opts = maxOutputLength === undefined ? {} : { maxOutputLength };
  if (payload.length <= SYNC_BYTES) {
    const syncLimit = Math.min(maxOutputLength ?? Infinity, SYNC_OUTPUT_BYTES);
    try {
      return Promise.resolve(zlib.gunzipSync(payload, { maxOutputLength: syncLimit }));
    } catch (err) {
      const overSync = (err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE' && syncLimit < (maxOutputLength ?? Infinity);
      if (!overSync) return Promise.reject(err);
    }
  }
  return gunzipAsync(payload, opts);
}
