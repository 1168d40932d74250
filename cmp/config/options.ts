import os from 'node:os';
import path from 'node:path';
import { parseGoDuration } from './go-duration.js';

/**
 * Every setting of the service, read once from the environment at start and frozen. Argo's own
 * knobs keep their names, defaults and leniency (an invalid ARGOCD_* value falls back to the
 * default, as Argo does); ours (`CMP_OFFLOAD_*`) are strict: a bad value stops the process with a
 * message naming the variable. The README's configuration table lists the same names.
 */
export interface Options {
  /** `--config-dir-path`: where plugin.yaml lives. */
  configDirPath: string;
  /** ARGOCD_PLUGINSOCKFILEPATH: directory of the plugin socket. */
  socketDir: string;
  /** `<ARGOCD_CMP_WORKDIR or tmpdir>/_cmp_server`: per-request work dirs live here. */
  workRoot: string;
  /** ARGOCD_GRPC_MAX_SIZE_MB in bytes: max gRPC message size, both directions. */
  maxMessageBytes: number;
  /** ARGOCD_EXEC_TIMEOUT: SIGTERM to a command's process group after this long. */
  execTimeoutMs: number;
  /** ARGOCD_EXEC_FATAL_TIMEOUT: SIGKILL this long after the SIGTERM. */
  execFatalTimeoutMs: number;
  /** CMP_OFFLOAD_CONCURRENCY: plugin runs at once in this process. */
  concurrency: number;
  cache: {
    /** CMP_OFFLOAD_CACHE: `on` or `off`. */
    enabled: boolean;
    /** CMP_OFFLOAD_CACHE_TTL */
    ttlMs: number;
    /** CMP_OFFLOAD_CACHE_SALT, mixed into every key (e.g. the worker image tag). */
    salt: string;
    /** CMP_OFFLOAD_CACHE_IGNORE_ENV: request env names left out of the key. */
    ignoreEnv: ReadonlySet<string>;
    /** CMP_OFFLOAD_CACHE_MAX_BYTES: size of the in-memory cache (standalone mode). */
    maxBytes: number;
  };
  limits: {
    /** CMP_OFFLOAD_MAX_TARBALL_BYTES: gzip bytes accepted per request. */
    tarballBytes: number;
    /** CMP_OFFLOAD_MAX_EXTRACTED_BYTES: bytes written when extracting. */
    extractedBytes: number;
    /** CMP_OFFLOAD_MAX_ENTRIES: tar entries per tarball. */
    entries: number;
    /** CMP_OFFLOAD_MAX_OUTPUT_BYTES: stdout kept from one plugin command. */
    outputBytes: number;
  };
  /** CMP_OFFLOAD_SHUTDOWN_GRACE: how long in-flight requests may finish after SIGTERM. */
  shutdownGraceMs: number;
}

export const DEFAULT_CONFIG_DIR = '/home/argocd/cmp-server/config';
export const DEFAULT_SOCKET_DIR = '/home/argocd/cmp-server/plugins';

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

export class OptionsError extends Error {}

type Env = Record<string, string | undefined>;

/** Compile the options from the environment (and the proxy/worker `--config-dir-path` flag). */
export function compileOptions(env: Env, flags: { configDirPath?: string } = {}): Options {
  const maxMessageBytes = argoMaxMessageBytes(env.ARGOCD_GRPC_MAX_SIZE_MB);
  const options: Options = {
    configDirPath: flags.configDirPath ?? DEFAULT_CONFIG_DIR,
    socketDir: env.ARGOCD_PLUGINSOCKFILEPATH || DEFAULT_SOCKET_DIR,
    workRoot: path.join(env.ARGOCD_CMP_WORKDIR || os.tmpdir(), '_cmp_server'),
    maxMessageBytes,
    execTimeoutMs: argoDuration(env.ARGOCD_EXEC_TIMEOUT, 90_000),
    execFatalTimeoutMs: argoDuration(env.ARGOCD_EXEC_FATAL_TIMEOUT, 10_000),
    concurrency: integer(env, 'CMP_OFFLOAD_CONCURRENCY', Math.max(1, os.availableParallelism()), 1),
    cache: {
      enabled: oneOf(env, 'CMP_OFFLOAD_CACHE', ['on', 'off'], 'on') === 'on',
      ttlMs: duration(env, 'CMP_OFFLOAD_CACHE_TTL', 24 * 3600_000),
      salt: env.CMP_OFFLOAD_CACHE_SALT ?? '',
      ignoreEnv: new Set(list(env.CMP_OFFLOAD_CACHE_IGNORE_ENV)),
      maxBytes: bytes(env, 'CMP_OFFLOAD_CACHE_MAX_BYTES', 256 * MiB),
    },
    limits: {
      tarballBytes: bytes(env, 'CMP_OFFLOAD_MAX_TARBALL_BYTES', 2 * GiB),
      extractedBytes: bytes(env, 'CMP_OFFLOAD_MAX_EXTRACTED_BYTES', 8 * GiB),
      entries: integer(env, 'CMP_OFFLOAD_MAX_ENTRIES', 500_000, 1),
      outputBytes: bytes(env, 'CMP_OFFLOAD_MAX_OUTPUT_BYTES', maxMessageBytes),
    },
    shutdownGraceMs: duration(env, 'CMP_OFFLOAD_SHUTDOWN_GRACE', 30_000),
  };
  return deepFreeze(options);
}

/** Argo: integer MiB in 0..2^31-1, anything else means the default of 100. */
function argoMaxMessageBytes(raw: string | undefined): number {
  const n = raw !== undefined && /^[+-]?\d+$/.test(raw.trim()) ? Number(raw) : NaN;
  const mb = Number.isInteger(n) && n >= 0 && n <= 2 ** 31 - 1 ? n : 100;
  // grpc-js takes a signed 32-bit length: clamp what Argo would accept beyond it.
  return Math.min(mb * MiB, 2 ** 31 - 1);
}

function argoDuration(raw: string | undefined, fallbackMs: number): number {
  if (raw === undefined || raw === '') return fallbackMs;
  try {
    return parseGoDuration(raw);
  } catch {
    return fallbackMs;
  }
}

function fail(name: string, raw: string, expected: string): never {
  throw new OptionsError(`invalid value ${JSON.stringify(raw)} for ${name}: expected ${expected}`);
}

function integer(env: Env, name: string, fallback: number, min: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw) || Number(raw) < min) fail(name, raw, `an integer >= ${min}`);
  return Number(raw);
}

function duration(env: Env, name: string, fallbackMs: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallbackMs;
  try {
    return parseGoDuration(raw);
  } catch {
    return fail(name, raw, 'a duration such as 90s, 5m or 24h');
  }
}

const UNITS: Record<string, number> = { '': 1, k: 1e3, m: 1e6, g: 1e9, ki: 1024, mi: MiB, gi: GiB };

/** A byte count: `1048576`, `512Mi`, `2Gi`, `100M`. */
function bytes(env: Env, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const m = /^(\d+)\s*([kKmMgG]i?)?$/.exec(raw.trim());
  const unit = UNITS[(m?.[2] ?? '').toLowerCase()];
  if (!m || unit === undefined || Number(m[1]) <= 0) fail(name, raw, 'a positive byte count such as 512Mi or 2Gi');
  return Number(m[1]) * unit;
}

function oneOf<T extends string>(env: Env, name: string, allowed: readonly T[], fallback: T): T {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!(allowed as readonly string[]).includes(raw)) fail(name, raw, `one of ${allowed.join(', ')}`);
  return raw as T;
}

function list(raw: string | undefined): string[] {
  return (raw ?? '')
    .split(',')
    .map(s => s.trim())
    .filter(Boolean);
}

function deepFreeze<T>(o: T): T {
  for (const v of Object.values(o as object)) if (v && typeof v === 'object' && !(v instanceof Set)) deepFreeze(v);
  return Object.freeze(o);
}
