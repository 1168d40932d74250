import { CmpError } from '../errors.js';

/** One request env entry as the repo-server sends it (EnvEntry). */
export interface EnvEntry {
  name: string;
  value: string;
}

/**
 * The service's own settings and credentials (CMP_OFFLOAD_*: the Redis URL with its password, the
 * signing key or its file; REDIS*: whatever a Redis client would pick up): a plugin command runs
 * code from a repository and gets none of them, in every mode (docs/security.md#trust-boundary).
 */
const SERVICE_ENV = /^(CMP_OFFLOAD_|REDIS)/i;

/** The process env a plugin command inherits: ours minus the service's own variables. */
export function pluginBaseEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(env)) if (!SERVICE_ENV.test(k)) out[k] = v;
  return out;
}

/** Go's exec error for an env entry with a NUL byte (checked at start, after lookup and ctx). */
export const ENV_NUL_TEXT = 'exec: environment variable contains NUL';

/**
 * The env list Argo gives a plugin command (docs/argo-contract.md#environment): the sidecar's own env followed by
 * the request entries rendered `name=value`, skipping empty names (empty values are kept, as
 * since Argo v3.0). The list is raw, like Go's `cmd.Env`: duplicates and NUL bytes are resolved
 * when the command starts (`spawnEnv`), so that errors surface in Go's order.
 */
export function commandEnv(base: NodeJS.ProcessEnv | readonly string[], request: readonly EnvEntry[]): string[] {
  const env: string[] = [];
  if (Array.isArray(base)) env.push(...(base as readonly string[]));
  else {
    for (const [k, v] of Object.entries(base as NodeJS.ProcessEnv)) if (v !== undefined) env.push(`${k}=${v}`);
  }
  for (const { name, value } of request) if (name !== '') env.push(`${name}=${value}`);
  return env;
}

/** Go's dedupEnv key: up to the first `=`, except that a single leading `=` belongs to the key. */
function keyEnd(kv: string): number {
  const i = kv.indexOf('=');
  return i === 0 ? Math.max(0, kv.indexOf('=', 1)) : i;
}

/**
 * Go's `dedupEnv` (os/exec) turned into the object Node's spawn wants: the last occurrence of a
 * key wins and keeps its position; any NUL fails the start. Node writes each pair as
 * `${key}=${value}`, so splitting at Go's key boundary reproduces the entry byte for byte
 * (`A=B=C` becomes key `A`, value `B=C`). Known limits of an object: integer-like keys ("1")
 * are enumerated first, and entries without any `=` (never produced by `commandEnv` from a
 * process env) are dropped rather than passed verbatim.
 */
export function spawnEnv(env: readonly string[]): Record<string, string> {
  if (env.some((kv) => kv.includes('\0'))) throw new CmpError(ENV_NUL_TEXT);
  const seen = new Set<string>();
  const kept: [string, string][] = [];
  for (let n = env.length - 1; n >= 0; n--) {
    const kv = env[n]!;
    const i = keyEnd(kv);
    if (i < 0) continue;
    const key = kv.slice(0, i);
    if (seen.has(key)) continue;
    seen.add(key);
    kept.push([key, kv.slice(i + 1)]);
  }
  // A null prototype so that hostile names such as `__proto__` stay ordinary keys.
  const out: Record<string, string> = Object.create(null);
  for (let n = kept.length - 1; n >= 0; n--) out[kept[n]![0]] = kept[n]![1];
  return out;
}
