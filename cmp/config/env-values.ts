import { parseGoDuration } from '../go/go-duration.js';
import type { SettingName } from './settings.js';

// Parsers of setting values from the environment, each naming its setting in the error it
// throws (OptionsError): integers, durations (Go's and Argo's forms), byte counts, choices, lists.

export const GiB = 1024 ** 3;

export const MiB = 1024 ** 2;

export class OptionsError extends Error {}

export type Env = Record<string, string | undefined>;

export function positiveDuration(env: Env, name: SettingName, fallbackMs: number): number {
  const ms = duration(env, name, fallbackMs);
  if (ms <= 0) fail(name, String(env[name]), 'a positive duration');
  return ms;
}

/** Go's strconv.ParseBool, the default when unset or invalid (Argo's ParseBoolFromEnv). */
export function goBool(raw: string | undefined, fallback: boolean): boolean {
  if (raw === undefined || raw === '') return fallback;
  if (['1', 't', 'T', 'TRUE', 'true', 'True'].includes(raw)) return true;
  if (['0', 'f', 'F', 'FALSE', 'false', 'False'].includes(raw)) return false;
  return fallback;
}

/** `k1=v1,k2=v2` (Argo's ParseStringToStringFromEnv): an entry without `=` makes it all invalid (empty). */
export function stringToString(raw: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of list(raw)) {
    const eq = pair.indexOf('=');
    if (eq <= 0) return {};
    out[pair.slice(0, eq).trim()] = pair.slice(eq + 1).trim();
  }
  return out;
}

export function argoDuration(raw: string | undefined, fallbackMs: number): number {
  if (raw === undefined || raw === '') return fallbackMs;
  try {
    return parseGoDuration(raw);
  } catch {
    return fallbackMs; // as Argo: a bad value means the default
  }
}

export function fail(name: SettingName, raw: string, expected: string): never {
  throw new OptionsError(`invalid value ${JSON.stringify(raw)} for ${name}: expected ${expected}`);
}

export function integer(env: Env, name: SettingName, fallback: number, min: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw) || Number(raw) < min) fail(name, raw, `an integer >= ${min}`);
  return Number(raw);
}

export function duration(env: Env, name: SettingName, fallbackMs: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallbackMs;
  try {
    return parseGoDuration(raw);
  } catch {
    return fail(name, raw, 'a duration such as 90s, 5m or 24h');
  }
}

export const UNITS: Record<string, number> = { '': 1, k: 1e3, m: 1e6, g: 1e9, ki: 1024, mi: MiB, gi: GiB };

/** A byte count: `1048576`, `512Mi`, `2Gi`, `100M`. */
export function bytes(env: Env, name: SettingName, fallback: number, zero = false): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const m = /^(\d+)\s*([kKmMgG]i?)?$/.exec(raw.trim());
  const unit = UNITS[(m?.[2] ?? '').toLowerCase()];
  if (!m || unit === undefined || Number(m[1]) < (zero ? 0 : 1)) fail(name, raw, `a ${zero ? '' : 'positive '}byte count such as 512Mi or 2Gi`);
  return Number(m[1]) * unit;
}

export function oneOf<T extends string>(env: Env, name: SettingName, allowed: readonly T[], fallback: T): T {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!(allowed as readonly string[]).includes(raw)) fail(name, raw, `one of ${allowed.join(', ')}`);
  return raw as T;
}

/** An env variable name (letters, digits, `_`, not starting with a digit). */
export function envName(env: Env, name: SettingName, fallback: string): string {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(raw)) fail(name, raw, 'an env variable name (letters, digits and _)');
  return raw;
}

export function list(raw: string | undefined): string[] {
  return (raw ?? '')
    .split(',')
    .map(s => s.trim())
    .filter(Boolean);
}
