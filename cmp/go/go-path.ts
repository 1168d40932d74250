import path from 'node:path';

/** Go's `filepath.Clean` for POSIX paths (no trailing slash, `.` for empty). */
export function goClean(p: string): string {
  if (p === '') return '.';
  const n = path.posix.normalize(p);
  return n.length > 1 && n.endsWith('/') ? n.slice(0, -1) : n;
}

/** Go's `filepath.Join`: empty elements are ignored, the result is cleaned. */
export function goJoin(...parts: string[]): string {
  const kept = parts.filter(s => s !== '');
  return kept.length === 0 ? '' : goClean(kept.join('/'));
}

/** Go's `filepath.Dir`. */
export function goDir(p: string): string {
  const i = p.lastIndexOf('/');
  return goClean(i < 0 ? '' : p.slice(0, i + 1));
}

/** Go's `filepath.Rel` for two absolute paths. */
export function goRel(base: string, target: string): string {
  return path.posix.relative(goClean(base), goClean(target)) || '.';
}

/** Argo's `files.Inbound`: the cleaned candidate is strictly inside `base` (string prefix `base/`). */
export function inbound(candidate: string, base: string): boolean {
  return goClean(candidate).startsWith(goClean(base) + '/');
}
