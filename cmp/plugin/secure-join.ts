import fs from 'node:fs';
import path from 'node:path';

const MAX_SYMLINK_HOPS = 255;

/**
 * cyphar/filepath-securejoin's SecureJoin: join `unsafe` under `root`, resolving symlinks inside
 * root as if root were `/`, and clamping `..` at root. Used for MatchRepository's appPath
 * (docs/argo-contract.md#app-path), which therefore never escapes the work dir.
 */
export function secureJoin(root: string, unsafe: string): string {
  let hops = 0;
  const resolved: string[] = [];
  const pending = unsafe.split('/').reverse();
  while (pending.length > 0) {
    const part = pending.pop()!;
    if (part === '' || part === '.') continue;
    if (part === '..') {
      resolved.pop();
      continue;
    }
    const candidate = path.join(root, ...resolved, part);
    let target: string | undefined;
    try {
      if (fs.lstatSync(candidate).isSymbolicLink()) target = fs.readlinkSync(candidate);
    } catch {
      // Missing components are joined as they are, like securejoin does.
    }
    if (target === undefined) {
      resolved.push(part);
      continue;
    }
    if (++hops > MAX_SYMLINK_HOPS) throw new Error(`securejoin: too many symlinks in ${unsafe}`);
    // An absolute target restarts from root; a relative one continues from the link's directory.
    if (target.startsWith('/')) resolved.length = 0;
    pending.push(...target.split('/').reverse());
  }
  return path.join(root, ...resolved);
}
