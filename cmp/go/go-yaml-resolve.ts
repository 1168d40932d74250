// go-yaml v2 `resolve.go` + the scalar part of `decode.go`, for decoding into interface{}.
import { GoFloat, MAX_INT64, type GoValue } from './go-values.js';

const TAG_PREFIX = 'tag:yaml.org,2002:';
const STR = TAG_PREFIX + 'str';
const BOOL = TAG_PREFIX + 'bool';
const INT = TAG_PREFIX + 'int';
const FLOAT = TAG_PREFIX + 'float';
const NULL = TAG_PREFIX + 'null';
const TIMESTAMP = TAG_PREFIX + 'timestamp';
const BINARY = TAG_PREFIX + 'binary';
export const MERGE_TAG = TAG_PREFIX + 'merge';

/** A thrown go-yaml `failf` (message without the `yaml: ` prefix). */
export class GoYamlError extends Error {}

type Resolved = { tag: string; value: GoValue };

const RESOLVE_MAP = new Map<string, Resolved>();
function addAll(tag: string, value: GoValue, words: string[]): void {
  for (const w of words) RESOLVE_MAP.set(w, { tag, value });
}
addAll(BOOL, true, ['y', 'Y', 'yes', 'Yes', 'YES', 'true', 'True', 'TRUE', 'on', 'On', 'ON']);
addAll(BOOL, false, ['n', 'N', 'no', 'No', 'NO', 'false', 'False', 'FALSE', 'off', 'Off', 'OFF']);
addAll(NULL, null, ['', '~', 'null', 'Null', 'NULL']);
addAll(FLOAT, new GoFloat(NaN), ['.nan', '.NaN', '.NAN']);
addAll(FLOAT, new GoFloat(Infinity), ['.inf', '.Inf', '.INF', '+.inf', '+.Inf', '+.INF']);
addAll(FLOAT, new GoFloat(-Infinity), ['-.inf', '-.Inf', '-.INF']);

const INT_BASE0 = /^([-+]?)(?:0[xX]([0-9a-fA-F]+)|0[oO]([0-7]+)|0[bB]([01]+)|0([0-7]*)|([1-9][0-9]*))$/;
const YAML_STYLE_FLOAT = /^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$/;
const DOT_FLOAT = /^\.[0-9]+(?:[eE][-+]?[0-9]+)?$/;
const SMALL_DECIMAL = /^-?[1-9][0-9]{0,14}$/;
const TWO_64 = 1n << 64n;

/** Go `strconv.ParseInt(s, 0, 64)` then `ParseUint(s, 0, 64)`; undefined when both fail. */
function parseGoInt(s: string): number | bigint | undefined {
  if (SMALL_DECIMAL.test(s)) return Number(s);
  const m = INT_BASE0.exec(s);
  if (m === null) return undefined;
  const sign = m[1]!;
  let mag: bigint;
  if (m[2] !== undefined) mag = BigInt('0x' + m[2]);
  else if (m[3] !== undefined) mag = BigInt('0o' + m[3]);
  else if (m[4] !== undefined) mag = BigInt('0b' + m[4]);
  else if (m[5] !== undefined) mag = m[5] === '' ? 0n : BigInt('0o' + m[5]);
  else mag = BigInt(m[6]!);
  let v: bigint;
  if (sign === '-') {
    if (mag > MAX_INT64 + 1n) return undefined;
    v = -mag;
  } else if (mag <= MAX_INT64) {
    v = mag;
  } else if (sign === '' && mag < TWO_64) {
    v = mag; // ParseUint accepts it (no sign allowed there)
  } else {
    return undefined;
  }
  return v >= -0x1fffffffffffffn && v <= 0x1fffffffffffffn ? Number(v) : v;
}

/** go-yaml's `resolve(tag, in)` for the tags it resolves ("" or str/bool/int/float/timestamp). */
function resolve(tag: string, s: string): Resolved {
  const c = s.length === 0 ? 'N' : s[0]!;
  if (tag === STR) return { tag: STR, value: s };
  const hinted = c === 'N' || c === '.' || c === '+' || c === '-' || (c >= '0' && c <= '9') || 'yYnNtTfFoO~'.includes(c);
  if (!hinted) return { tag: STR, value: s };
  const known = RESOLVE_MAP.get(s);
  if (known !== undefined) return known;
  if (c === '.') {
    if (DOT_FLOAT.test(s)) {
      const f = Number(s);
      if (Number.isFinite(f)) return { tag: FLOAT, value: new GoFloat(f) };
    }
    return { tag: STR, value: s };
  }
  if (c === '+' || c === '-' || (c >= '0' && c <= '9')) {
    // Timestamps decode into interface{} as the original string, which is also what the number paths
    // below leave them as, so only an explicit !!timestamp needs the actual check.
    if (tag === TIMESTAMP && isGoTimestamp(s)) return { tag: TIMESTAMP, value: s };
    const plain = s.includes('_') ? s.replaceAll('_', '') : s;
    const n = parseGoInt(plain);
    if (n !== undefined) return { tag: INT, value: n };
    if (YAML_STYLE_FLOAT.test(plain)) {
      const f = Number(plain);
      if (Number.isFinite(f)) return { tag: FLOAT, value: new GoFloat(f) };
    }
  }
  return { tag: STR, value: s };
}

const TS_DATE = /^(\d{4})-(\d{1,2})-(\d{1,2})$/;
const TS_FULL = /^(\d{4})-(\d{1,2})-(\d{1,2})(?:[Tt](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.\d+)?(?:Z|[-+]\d{2}:\d{2})| (\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.\d+)?)$/;

/** Approximation of go-yaml's `parseTimestamp` (time.Parse with its four layouts). */
function isGoTimestamp(s: string): boolean {
  const m = TS_DATE.exec(s) ?? TS_FULL.exec(s);
  if (m === null) return false;
  const month = Number(m[2]);
  const day = Number(m[3]);
  if (month < 1 || month > 12 || day < 1 || day > new Date(Date.UTC(Number(m[1]), month, 0)).getUTCDate()) return false;
  const hms = m[4] !== undefined ? [m[4], m[5], m[6]] : m[7] !== undefined ? [m[7], m[8], m[9]] : undefined;
  return hms === undefined || (Number(hms[0]) < 24 && Number(hms[1]) < 60 && Number(hms[2]) < 60);
}

function shortTag(tag: string): string {
  return tag.startsWith(TAG_PREFIX) ? '!!' + tag.slice(TAG_PREFIX.length) : tag;
}

/** Expands a tag as written (`!!int`, `!<...>`, `!local`) to go-yaml's long form. */
export function expandTag(raw: string): string {
  if (raw.startsWith('!!')) return TAG_PREFIX + raw.slice(2);
  if (raw.startsWith('!<') && raw.endsWith('>')) return raw.slice(2, -1);
  return raw;
}

/** Decodes a plain untagged scalar (the hot path). */
export function resolvePlain(s: string): GoValue {
  return resolve('', s).value;
}

/** Decodes a scalar carrying an explicit tag (already expanded; never "" or "!"). */
export function resolveTagged(tag: string, s: string): GoValue {
  if (tag === BINARY) return decodeBinary(s);
  if (tag !== STR && tag !== BOOL && tag !== INT && tag !== FLOAT && tag !== TIMESTAMP) return s;
  const r = resolve(tag, s);
  if (r.tag === tag || tag === STR) return r.value;
  if (tag === FLOAT && r.tag === INT && !(typeof r.value === 'bigint' && r.value > MAX_INT64)) {
    return new GoFloat(Number(r.value));
  }
  throw new GoYamlError(`cannot decode ${shortTag(r.tag)} \`${s}\` as a ${shortTag(tag)}`);
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** `base64.StdEncoding.DecodeString` (which skips \r and \n), then `string(bytes)`. */
function decodeBinary(s: string): string {
  const compact = s.replace(/[\r\n]/g, '');
  if (!BASE64.test(compact)) throw new GoYamlError('!!binary value contains invalid base64 data');
  return Buffer.from(compact, 'base64').toString('utf8');
}
