import { goJsonSyntaxError } from './go-json-scanner.js';

/*
 * A schema-driven emulation of Go's `encoding/json.Unmarshal` (Go 1.24+ v1 decoder) for the few
 * Go types Argo's CMP server decodes: plugin.yaml (after YAML→JSON) and the dynamic parameters
 * command's stdout. What it reproduces, because users see it in errors or in results:
 *   - object keys match struct fields exactly or else case-insensitively (Go's foldName);
 *     unknown keys are skipped; a repeated key decodes again into the same value (last wins,
 *     structs and maps merge, slices reuse their backing array);
 *   - `null` sets slices, maps and pointers to nil and leaves every other value untouched;
 *   - a type mismatch does not stop decoding: the FIRST one is reported at the end, with Go's
 *     text and field path (`json: cannot unmarshal string into Go struct field
 *     Command.spec.generate.command of type []string`); since Go 1.24 the path also names the
 *     embedded structs a promoted field comes through (`Find.spec.discover.find.Command.command`).
 */

/** A Go type, described just enough to decode into it and to name it in errors. */
export type GoType = GoScalar | GoSlice | GoMap | GoPtr | GoStruct;

export interface GoScalar {
  readonly kind: 'string' | 'bool' | 'int64';
  /** Go's `reflect.Type.String()`, e.g. `string`, `types.UID`. */
  readonly goName: string;
}
export interface GoSlice {
  readonly kind: 'slice';
  readonly elem: GoType;
}
/** `map[string]<elem>`. */
export interface GoMap {
  readonly kind: 'map';
  readonly elem: GoType;
}
export interface GoPtr {
  readonly kind: 'ptr';
  readonly elem: GoType;
}
export interface GoStruct {
  readonly kind: 'struct';
  /** Package-qualified name, e.g. `plugin.Command`; errors use the part after the dot as the struct name. */
  readonly goName: string;
  readonly fields: readonly GoField[];
}
export interface GoField {
  /** The JSON key Go matches (tag name, or the Go field name when there is no json tag). */
  readonly json: string;
  /** The property holding the value in the decoded JS object. */
  readonly prop: string;
  readonly type: GoType;
  /** Go names of the embedded structs this field is promoted through (they appear in error paths). */
  readonly via?: readonly string[];
}

export const goString: GoScalar = { kind: 'string', goName: 'string' };
export const goBool: GoScalar = { kind: 'bool', goName: 'bool' };
export const goInt64: GoScalar = { kind: 'int64', goName: 'int64' };
/** A named string type such as `types.UID`. */
export const goNamedString = (goName: string): GoScalar => ({ kind: 'string', goName });
export const goSlice = (elem: GoType): GoSlice => ({ kind: 'slice', elem });
export const goMap = (elem: GoType): GoMap => ({ kind: 'map', elem });
export const goPtr = (elem: GoType): GoPtr => ({ kind: 'ptr', elem });
export const goStruct = (goName: string, fields: readonly GoField[]): GoStruct => ({ kind: 'struct', goName, fields });
/** A field `Name T \`json:"name"\`` whose JS property is the JSON name. */
export const field = (json: string, type: GoType, prop: string = json): GoField => ({ json, prop, type });
/** The fields of an embedded struct promoted into its parent (`Find{Command; Glob}`, `TypeMeta ",inline"`). */
export const embedded = (goFieldName: string, s: GoStruct): GoField[] =>
  s.fields.map((f) => ({ ...f, via: [goFieldName, ...(f.via ?? [])] }));

/** Go's `reflect.Type.String()` of a type. */
export function goTypeName(t: GoType): string {
  switch (t.kind) {
    case 'slice':
      return `[]${goTypeName(t.elem)}`;
    case 'map':
      return `map[string]${goTypeName(t.elem)}`;
    case 'ptr':
      return `*${goTypeName(t.elem)}`;
    default:
      return t.goName;
  }
}

/**
 * The zero value of a Go type as the decoder represents it: nil slices and maps are empty, nil
 * pointers null, int64 a decimal string (keeps decoded values JSON-serialisable).
 */
function goZero(t: GoType): unknown {
  switch (t.kind) {
    case 'string':
      return '';
    case 'bool':
      return false;
    case 'int64':
      return '0';
    case 'slice':
      return [];
    case 'map':
      return {};
    case 'ptr':
      return null;
    case 'struct': {
      const o: Record<string, unknown> = {};
      for (const f of t.fields) o[f.prop] = goZero(f.type);
      return o;
    }
  }
}

/** An error of Go's encoding/json, with its exact text. */
export class GoJsonError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'GoJsonError';
  }
}

/**
 * `json.Unmarshal(text, &v)` where v starts as the zero value of `t`: a syntax error first (Go's
 * scanner text), else decode and throw the first type error, else return the value. A top-level
 * `null` yields the zero value. Errors are GoJsonError with Go's exact text.
 */
export function goJsonUnmarshal<T>(text: string, t: GoType): T {
  const syntax = goJsonSyntaxError(text);
  if (syntax !== undefined) throw new GoJsonError(syntax);
  const d = new Decoder(text);
  const v = d.value(t, goZero(t));
  if (d.savedError !== undefined) throw new GoJsonError(d.savedError);
  return v as T;
}

/** Byte sizes Go's growslice uses to size a grown backing array, and whether the element holds pointers. */
function elemLayout(t: GoType): { size: number; noscan: boolean } {
  switch (t.kind) {
    case 'bool':
      return { size: 1, noscan: true };
    case 'int64':
      return { size: 8, noscan: true };
    case 'string':
      return { size: 16, noscan: false };
    case 'slice':
      return { size: 24, noscan: false };
    default:
      return { size: 8, noscan: false }; // map and pointer headers; no slice of struct values is modelled
  }
}

// runtime/sizeclasses.go (Go 1.21+).
const SIZE_CLASSES = [
  8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448,
  480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096,
  4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072,
  20480, 21760, 24576, 27264, 28672, 32768,
];

/**
 * The capacity `reflect.Value.Grow(1)` gives a full slice (runtime nextslicecap + roundupsize
 * with malloc headers). It decides which stale elements a later, shorter decode of a repeated key
 * exposes, so `null` elements (which leave an element untouched) read the same values as in Go.
 */
function grownCap(oldCap: number, newLen: number, elem: GoType): number {
  let cap = oldCap;
  if (newLen > oldCap * 2) cap = newLen;
  else if (oldCap < 256) cap = oldCap * 2;
  else while (cap < newLen) cap += (cap + 768) >> 2;
  const { size, noscan } = elemLayout(elem);
  const mem = cap * size;
  const header = !noscan && mem > 512 && mem <= 32768 - 8 ? 8 : 0;
  const req = mem + header;
  const rounded = req <= 32768 - 8 ? (SIZE_CLASSES.find((c) => c >= req) ?? req) - header : Math.ceil(mem / 8192) * 8192;
  return Math.floor(rounded / size);
}

/**
 * Go's foldName for matching against ASCII field names: ASCII letters upper-cased, and the two
 * non-ASCII runes whose simple case-fold orbit holds an ASCII letter (KELVIN SIGN ~ K, LONG S ~ S)
 * folded to it. Every other rune folds to a non-ASCII rune in Go, so it is kept as is: it can never
 * match an ASCII name either way (note U+0130/U+0131 have no simple folding and do not match I).
 */
export function goFoldName(s: string): string {
  return s.replace(/[a-z\u212a\u017f]/g, (ch) => (ch === '\u212a' ? 'K' : ch === '\u017f' ? 'S' : ch.toUpperCase()));
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
const PHASE_PANIC = 'JSON decoder out of sync - data changing underfoot?';

/** Decodes one JSON text already known to be valid; positions are UTF-16 indexes into it. */
class Decoder {
  savedError: string | undefined;
  private pos = 0;
  private structName: string | null = null;
  private readonly fieldStack: string[] = [];
  /** Each decoded slice's whole backing array: the slice is its prefix, the rest stale capacity. */
  private readonly backings = new WeakMap<unknown[], unknown[]>();
  private readonly foldedFields = new WeakMap<GoStruct, Map<string, GoField>>();

  constructor(private readonly text: string) {}

  /** Decodes the next value into `old` (a value of type `t`) and returns the new value. */
  value(t: GoType, old: unknown): unknown {
    this.skipSpace();
    const c = this.text.charCodeAt(this.pos);
    if (c === 0x7b /* { */) return this.object(t, old);
    if (c === 0x5b /* [ */) return this.array(t, old);
    return this.literal(t, old);
  }

  private typeError(jsonKind: string, t: GoType): void {
    if (this.savedError !== undefined) return;
    const where =
      this.structName !== null || this.fieldStack.length > 0
        ? `Go struct field ${this.structName ?? ''}.${this.fieldStack.join('.')}`
        : 'Go value';
    this.savedError = `json: cannot unmarshal ${jsonKind} into ${where} of type ${goTypeName(t)}`;
  }

  private object(t0: GoType, old: unknown): unknown {
    const { t, target } = this.deref(t0, old);
    if (t.kind === 'struct') return this.structObject(t, target as Record<string, unknown>);
    if (t.kind === 'map') return this.mapObject(t, target as Record<string, unknown>);
    this.typeError('object', t);
    this.skipValue();
    return target;
  }

  private structObject(t: GoStruct, target: Record<string, unknown>): Record<string, unknown> {
    const folded = this.foldedOf(t);
    const origStruct = this.structName;
    const origDepth = this.fieldStack.length;
    this.pos++; // {
    for (;;) {
      this.skipSpace();
      if (this.text.charCodeAt(this.pos) === 0x7d /* } */) break;
      const key = this.readString();
      this.skipSpace();
      this.pos++; // :
      const f = t.fields.find((x) => x.json === key) ?? folded.get(goFoldName(key));
      if (f === undefined) {
        this.skipSpace();
        this.skipValue();
      } else {
        if (f.via !== undefined) this.fieldStack.push(...f.via);
        this.fieldStack.push(f.json);
        this.structName = t.goName.slice(t.goName.lastIndexOf('.') + 1);
        target[f.prop] = this.value(f.type, target[f.prop]);
        this.fieldStack.length = origDepth;
        this.structName = origStruct;
      }
      this.skipSpace();
      if (this.text.charCodeAt(this.pos) === 0x2c /* , */) this.pos++;
    }
    this.pos++; // }
    return target;
  }

  private mapObject(t: GoMap, target: Record<string, unknown>): Record<string, unknown> {
    this.pos++; // {
    for (;;) {
      this.skipSpace();
      if (this.text.charCodeAt(this.pos) === 0x7d) break;
      const key = this.readString();
      this.skipSpace();
      this.pos++; // :
      // Go decodes into a fresh zero element and stores it even after a type error.
      const v = this.value(t.elem, goZero(t.elem));
      Object.defineProperty(target, key, { value: v, enumerable: true, writable: true, configurable: true });
      this.skipSpace();
      if (this.text.charCodeAt(this.pos) === 0x2c) this.pos++;
    }
    this.pos++; // }
    return target;
  }

  private array(t0: GoType, old: unknown): unknown {
    const { t, target } = this.deref(t0, old);
    if (t.kind !== 'slice') {
      this.typeError('array', t);
      this.skipValue();
      return target;
    }
    const visible = target as unknown[];
    let store = this.backings.get(visible) ?? [...visible];
    let len = visible.length;
    let i = 0;
    this.pos++; // [
    for (;;) {
      this.skipSpace();
      if (this.text.charCodeAt(this.pos) === 0x5d /* ] */) break;
      if (i >= store.length) {
        const cap = grownCap(store.length, i + 1, t.elem);
        const grown = store.slice(0, len);
        while (grown.length < cap) grown.push(goZero(t.elem));
        store = grown;
      }
      if (i >= len) len = i + 1;
      store[i] = this.value(t.elem, store[i]);
      i++;
      this.skipSpace();
      if (this.text.charCodeAt(this.pos) === 0x2c) this.pos++;
    }
    this.pos++; // ]
    if (i < len) len = i;
    if (i === 0) store = [];
    const result = store.slice(0, len);
    this.backings.set(result, store);
    return result;
  }

  private literal(t0: GoType, old: unknown): unknown {
    const c = this.text.charCodeAt(this.pos);
    if (c === 0x6e /* n */) {
      this.pos += 4;
      // null: nil for slices, maps and pointers; no effect on anything else.
      if (t0.kind === 'slice' || t0.kind === 'map') return goZero(t0);
      if (t0.kind === 'ptr') return null;
      return old;
    }
    const { t, target } = this.deref(t0, old);
    if (c === 0x22 /* " */) {
      const s = this.readString();
      if (t.kind === 'string') return s;
      this.typeError('string', t);
      return target;
    }
    if (c === 0x74 /* t */ || c === 0x66 /* f */) {
      const b = c === 0x74;
      this.pos += b ? 4 : 5;
      if (t.kind === 'bool') return b;
      this.typeError('bool', t);
      return target;
    }
    const raw = this.readNumber();
    if (t.kind === 'int64') {
      if (/^-?\d+$/.test(raw)) {
        const n = BigInt(raw);
        if (n >= -(2n ** 63n) && n < 2n ** 63n) return n.toString();
      }
      this.typeError(`number ${raw}`, t);
      return target;
    }
    this.typeError('number', t);
    return target;
  }

  /**
   * Go's indirect(): a non-null value first allocates a nil pointer (even if it then fails to
   * decode) and decodes into its target. A pointer is represented by its target, null when nil.
   */
  private deref(t: GoType, old: unknown): { t: GoType; target: unknown } {
    return t.kind === 'ptr' ? { t: t.elem, target: old ?? goZero(t.elem) } : { t, target: old };
  }

  private foldedOf(t: GoStruct): Map<string, GoField> {
    let m = this.foldedFields.get(t);
    if (m === undefined) {
      m = new Map(t.fields.map((f) => [goFoldName(f.json), f]));
      this.foldedFields.set(t, m);
    }
    return m;
  }

  private skipSpace(): void {
    const s = this.text;
    for (;;) {
      const c = s.charCodeAt(this.pos);
      if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) break;
      this.pos++;
    }
    // The text was validated first; running off its end means the validator and we disagree.
    if (this.pos >= s.length) throw new Error(PHASE_PANIC);
  }

  private readNumber(): string {
    const start = this.pos;
    for (;;) {
      const c = this.text.charCodeAt(this.pos);
      const numeric = (c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x2b || c === 0x2e || c === 0x65 || c === 0x45;
      if (!numeric) break;
      this.pos++;
    }
    return this.text.slice(start, this.pos);
  }

  /** Skips one value without recursion (nesting may be thousands deep). */
  private skipValue(): void {
    const s = this.text;
    let depth = 0;
    do {
      this.skipSpace();
      const c = s.charCodeAt(this.pos);
      if (c === 0x22) this.readString();
      else if (c === 0x7b || c === 0x5b) {
        depth++;
        this.pos++;
      } else if (c === 0x7d || c === 0x5d) {
        depth--;
        this.pos++;
      } else if (c === 0x2c || c === 0x3a) this.pos++;
      else if (c === 0x74 || c === 0x6e) this.pos += 4;
      else if (c === 0x66) this.pos += 5;
      else this.readNumber();
    } while (depth > 0);
  }

  /**
   * Reads a JSON string as Go's unquote does: escapes decoded, a `\u` surrogate that does not
   * form a valid pair becomes U+FFFD (as do lone surrogates already in the text).
   */
  private readString(): string {
    const s = this.text;
    let i = this.pos + 1;
    let out = '';
    let runStart = i;
    for (;;) {
      if (i >= s.length) throw new Error(PHASE_PANIC);
      const c = s.charCodeAt(i);
      if (c === 0x22) break;
      if (c !== 0x5c) {
        i++;
        continue;
      }
      out += s.slice(runStart, i);
      const e = s[i + 1];
      i += 2;
      switch (e) {
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          const r = parseInt(s.slice(i, i + 4), 16);
          i += 4;
          if (r >= 0xd800 && r < 0xe000) {
            const lo = s[i] === '\\' && s[i + 1] === 'u' ? parseInt(s.slice(i + 2, i + 6), 16) : -1;
            if (r < 0xdc00 && lo >= 0xdc00 && lo < 0xe000) {
              out += String.fromCharCode(r, lo);
              i += 6;
            } else out += '\ufffd';
          } else out += String.fromCharCode(r);
          break;
        }
        default:
          out += e; // " \ /
      }
      runStart = i;
    }
    out += s.slice(runStart, i);
    this.pos = i + 1;
    return out.replace(LONE_SURROGATE, '\ufffd');
  }
}
