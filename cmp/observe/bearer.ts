import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';

/** Whether the request carries `Authorization: Bearer <token>`. */
export function hasBearer(req: FastifyRequest, token: string): boolean {
  const auth = req.headers.authorization;
  return auth?.startsWith('Bearer ') === true && same(auth.slice(7), token);
}

/** Constant-time comparison of two strings of any lengths (hashed first). */
export function same(a: string, b: string): boolean {
  const h = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(h(a), h(b)) && a.length === b.length;
}
