import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * HMAC-SHA256 over a domain string and a list of parts, each length-prefixed so that no two
 * different lists encode alike. The domain separates what is signed (jobs, cache entries,
 * failures): a signature of one kind never verifies as another.
 */
export function sign(key: Buffer, domain: string, parts: readonly (string | Buffer)[]): Buffer {
  const h = createHmac('sha256', key);
  for (const part of [domain, ...parts]) {
    const buf = typeof part === 'string' ? Buffer.from(part, 'utf8') : part;
    const len = Buffer.alloc(8);
    len.writeBigUInt64BE(BigInt(buf.length));
    h.update(len);
    h.update(buf);
  }
  return h.digest();
}

/** Constant-time check of a signature made by `sign`. */
export function verify(key: Buffer, domain: string, parts: readonly (string | Buffer)[], signature: Buffer): boolean {
  const expected = sign(key, domain, parts);
  return signature.length === expected.length && timingSafeEqual(signature, expected);
}
