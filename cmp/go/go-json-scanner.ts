// A port of Go's encoding/json scanner state machine (scanner.go), kept byte-for-byte compatible in the
// two things callers observe: where a value ends and the exact wording/offset of syntax errors.

const MAX_NESTING_DEPTH = 10000;

// Scanner states (Go's step functions).
const S_BEGIN_VALUE_OR_EMPTY = 0;
const S_BEGIN_VALUE = 1;
const S_BEGIN_STRING_OR_EMPTY = 2;
const S_BEGIN_STRING = 3;
const S_END_VALUE = 4;
const S_END_TOP = 5;
const S_IN_STRING = 6;
const S_IN_STRING_ESC = 7;
const S_ESC_U = 8;
const S_ESC_U1 = 9;
const S_ESC_U12 = 10;
const S_ESC_U123 = 11;
const S_NEG = 12;
const S_1 = 13;
const S_0 = 14;
const S_DOT = 15;
const S_DOT0 = 16;
const S_E = 17;
const S_E_SIGN = 18;
const S_E0 = 19;
const S_T = 20;
const S_TR = 21;
const S_TRU = 22;
const S_F = 23;
const S_FA = 24;
const S_FAL = 25;
const S_FALS = 26;
const S_N = 27;
const S_NU = 28;
const S_NUL = 29;
const S_ERROR = 30;

// Step results.
const SCAN_CONTINUE = 0;
const SCAN_SKIP_SPACE = 1;
const SCAN_END_OBJECT_OR_ARRAY = 2;
const SCAN_END = 3;
const SCAN_ERROR = 4;

const PARSE_OBJECT_KEY = 0;
const PARSE_OBJECT_VALUE = 1;
const PARSE_ARRAY_VALUE = 2;

const LITERAL_STEPS: Record<number, [number, number, string]> = {
  [S_T]: [0x72, S_TR, "in literal true (expecting 'r')"],
  [S_TR]: [0x75, S_TRU, "in literal true (expecting 'u')"],
  [S_TRU]: [0x65, S_END_VALUE, "in literal true (expecting 'e')"],
  [S_F]: [0x61, S_FA, "in literal false (expecting 'a')"],
  [S_FA]: [0x6c, S_FAL, "in literal false (expecting 'l')"],
  [S_FAL]: [0x73, S_FALS, "in literal false (expecting 's')"],
  [S_FALS]: [0x65, S_END_VALUE, "in literal false (expecting 'e')"],
  [S_N]: [0x75, S_NU, "in literal null (expecting 'u')"],
  [S_NU]: [0x6c, S_NUL, "in literal null (expecting 'l')"],
  [S_NUL]: [0x6c, S_END_VALUE, "in literal null (expecting 'l')"],
};

function isSpace(c: number): boolean {
  return c <= 0x20 && (c === 0x20 || c === 0x09 || c === 0x0d || c === 0x0a);
}

function isHex(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46);
}

const GO_SHORT_ESCAPES: Record<number, string> = { 7: '\\a', 8: '\\b', 9: '\\t', 10: '\\n', 11: '\\v', 12: '\\f', 13: '\\r' };

/** Go's `quoteChar`: how a byte is shown inside `invalid character ...` messages. */
export function quoteChar(c: number): string {
  if (c === 0x27) return "'\\''";
  if (c === 0x22) return "'\"'";
  if (c === 0x5c) return "'\\\\'";
  // strconv.Quote(string(rune(c))): the byte is taken as the code point U+00XX.
  const short = GO_SHORT_ESCAPES[c];
  if (short !== undefined) return `'${short}'`;
  if (c < 0x20 || c === 0x7f) return `'\\x${c.toString(16).padStart(2, '0')}'`;
  if ((c >= 0x80 && c <= 0xa0) || c === 0xad) return `'\\u00${c.toString(16).padStart(2, '0')}'`;
  return `'${String.fromCharCode(c)}'`;
}

/** The Go scanner: feed bytes with `step`, read `err` after SCAN_ERROR. */
class Scanner {
  state = S_BEGIN_VALUE;
  stack: number[] = [];
  endTop = false;
  err: string | undefined;
  errOffset = 0;
  bytes = 0;

  private fail(c: number, context: string): number {
    this.state = S_ERROR;
    this.err = `invalid character ${quoteChar(c)} ${context}`;
    this.errOffset = this.bytes;
    return SCAN_ERROR;
  }

  private push(c: number, ps: number): number {
    this.stack.push(ps);
    if (this.stack.length <= MAX_NESTING_DEPTH) return SCAN_CONTINUE;
    return this.fail(c, 'exceeded max depth');
  }

  private beginValue(c: number): number {
    if (isSpace(c)) return SCAN_SKIP_SPACE;
    switch (c) {
      case 0x7b: // {
        this.state = S_BEGIN_STRING_OR_EMPTY;
        return this.push(c, PARSE_OBJECT_KEY);
      case 0x5b: // [
        this.state = S_BEGIN_VALUE_OR_EMPTY;
        return this.push(c, PARSE_ARRAY_VALUE);
      case 0x22:
        this.state = S_IN_STRING;
        return SCAN_CONTINUE;
      case 0x2d:
        this.state = S_NEG;
        return SCAN_CONTINUE;
      case 0x30:
        this.state = S_0;
        return SCAN_CONTINUE;
      case 0x74:
        this.state = S_T;
        return SCAN_CONTINUE;
      case 0x66:
        this.state = S_F;
        return SCAN_CONTINUE;
      case 0x6e:
        this.state = S_N;
        return SCAN_CONTINUE;
    }
    if (c >= 0x31 && c <= 0x39) {
      this.state = S_1;
      return SCAN_CONTINUE;
    }
    return this.fail(c, 'looking for beginning of value');
  }

  private beginString(c: number): number {
    if (isSpace(c)) return SCAN_SKIP_SPACE;
    if (c === 0x22) {
      this.state = S_IN_STRING;
      return SCAN_CONTINUE;
    }
    return this.fail(c, 'looking for beginning of object key string');
  }

  private endValue(c: number): number {
    const n = this.stack.length;
    if (n === 0) {
      this.state = S_END_TOP;
      this.endTop = true;
      return this.endTopStep(c);
    }
    if (isSpace(c)) {
      this.state = S_END_VALUE;
      return SCAN_SKIP_SPACE;
    }
    switch (this.stack[n - 1]) {
      case PARSE_OBJECT_KEY:
        if (c === 0x3a) {
          this.stack[n - 1] = PARSE_OBJECT_VALUE;
          this.state = S_BEGIN_VALUE;
          return SCAN_CONTINUE;
        }
        return this.fail(c, 'after object key');
      case PARSE_OBJECT_VALUE:
        if (c === 0x2c) {
          this.stack[n - 1] = PARSE_OBJECT_KEY;
          this.state = S_BEGIN_STRING;
          return SCAN_CONTINUE;
        }
        if (c === 0x7d) return this.pop();
        return this.fail(c, 'after object key:value pair');
      default:
        if (c === 0x2c) {
          this.state = S_BEGIN_VALUE;
          return SCAN_CONTINUE;
        }
        if (c === 0x5d) return this.pop();
        return this.fail(c, 'after array element');
    }
  }

  private pop(): number {
    this.stack.pop();
    if (this.stack.length === 0) {
      this.state = S_END_TOP;
      this.endTop = true;
    } else {
      this.state = S_END_VALUE;
    }
    return SCAN_END_OBJECT_OR_ARRAY;
  }

  private endTopStep(c: number): number {
    // Go complains about a non-space byte here only on the next step (or at eof).
    if (!isSpace(c)) this.fail(c, 'after top-level value');
    return SCAN_END;
  }

  step(c: number): number {
    switch (this.state) {
      case S_BEGIN_VALUE_OR_EMPTY:
        if (isSpace(c)) return SCAN_SKIP_SPACE;
        if (c === 0x5d) return this.endValue(c);
        return this.beginValue(c);
      case S_BEGIN_VALUE:
        return this.beginValue(c);
      case S_BEGIN_STRING_OR_EMPTY:
        if (isSpace(c)) return SCAN_SKIP_SPACE;
        if (c === 0x7d) {
          this.stack[this.stack.length - 1] = PARSE_OBJECT_VALUE;
          return this.endValue(c);
        }
        return this.beginString(c);
      case S_BEGIN_STRING:
        return this.beginString(c);
      case S_END_VALUE:
        return this.endValue(c);
      case S_END_TOP:
        return this.endTopStep(c);
      case S_IN_STRING:
        if (c === 0x22) {
          this.state = S_END_VALUE;
          return SCAN_CONTINUE;
        }
        if (c === 0x5c) {
          this.state = S_IN_STRING_ESC;
          return SCAN_CONTINUE;
        }
        if (c < 0x20) return this.fail(c, 'in string literal');
        return SCAN_CONTINUE;
      case S_IN_STRING_ESC:
        switch (c) {
          case 0x62: case 0x66: case 0x6e: case 0x72: case 0x74: case 0x5c: case 0x2f: case 0x22:
            this.state = S_IN_STRING;
            return SCAN_CONTINUE;
          case 0x75:
            this.state = S_ESC_U;
            return SCAN_CONTINUE;
        }
        return this.fail(c, 'in string escape code');
      case S_ESC_U:
      case S_ESC_U1:
      case S_ESC_U12:
      case S_ESC_U123:
        if (isHex(c)) {
          this.state = this.state === S_ESC_U123 ? S_IN_STRING : this.state + 1;
          return SCAN_CONTINUE;
        }
        return this.fail(c, 'in \\u hexadecimal character escape');
      case S_NEG:
        if (c === 0x30) {
          this.state = S_0;
          return SCAN_CONTINUE;
        }
        if (c >= 0x31 && c <= 0x39) {
          this.state = S_1;
          return SCAN_CONTINUE;
        }
        return this.fail(c, 'in numeric literal');
      case S_1:
        if (c >= 0x30 && c <= 0x39) return SCAN_CONTINUE;
        return this.state0(c);
      case S_0:
        return this.state0(c);
      case S_DOT:
        if (c >= 0x30 && c <= 0x39) {
          this.state = S_DOT0;
          return SCAN_CONTINUE;
        }
        return this.fail(c, 'after decimal point in numeric literal');
      case S_DOT0:
        if (c >= 0x30 && c <= 0x39) return SCAN_CONTINUE;
        if (c === 0x65 || c === 0x45) {
          this.state = S_E;
          return SCAN_CONTINUE;
        }
        return this.endValue(c);
      case S_E:
        if (c === 0x2b || c === 0x2d) {
          this.state = S_E_SIGN;
          return SCAN_CONTINUE;
        }
        return this.eSign(c);
      case S_E_SIGN:
        return this.eSign(c);
      case S_E0:
        if (c >= 0x30 && c <= 0x39) return SCAN_CONTINUE;
        return this.endValue(c);
      case S_ERROR:
        return SCAN_ERROR;
      default: {
        const lit = LITERAL_STEPS[this.state]!;
        if (c === lit[0]) {
          this.state = lit[1];
          return SCAN_CONTINUE;
        }
        return this.fail(c, lit[2]);
      }
    }
  }

  private state0(c: number): number {
    if (c === 0x2e) {
      this.state = S_DOT;
      return SCAN_CONTINUE;
    }
    if (c === 0x65 || c === 0x45) {
      this.state = S_E;
      return SCAN_CONTINUE;
    }
    return this.endValue(c);
  }

  private eSign(c: number): number {
    if (c >= 0x30 && c <= 0x39) {
      this.state = S_E0;
      return SCAN_CONTINUE;
    }
    return this.fail(c, 'in exponent of numeric literal');
  }
}

/** Outcome of reading one value from a Go `json.Decoder` stream. */
export type JsonValueScan =
  | { kind: 'value'; start: number; end: number }
  | { kind: 'eof' }
  | { kind: 'unexpected-eof' }
  | { kind: 'syntax'; message: string; offset: number };

const FAST_FAIL = -1;

function skipWs(b: Uint8Array, i: number): number {
  const n = b.length;
  while (i < n) {
    const c = b[i]!;
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
    i++;
  }
  return i;
}

/** End of the string whose opening quote is at `i`, or FAST_FAIL. */
function fastString(b: Uint8Array, i: number): number {
  const n = b.length;
  let j = i + 1;
  while (j < n) {
    const c = b[j]!;
    if (c === 0x22) return j + 1;
    if (c < 0x20) return FAST_FAIL;
    if (c === 0x5c) {
      const e = b[j + 1];
      if (e === 0x75) {
        for (let k = 2; k < 6; k++) if (j + k >= n || !isHex(b[j + k]!)) return FAST_FAIL;
        j += 6;
        continue;
      }
      if (e !== 0x22 && e !== 0x5c && e !== 0x2f && e !== 0x62 && e !== 0x66 && e !== 0x6e && e !== 0x72 && e !== 0x74) {
        return FAST_FAIL;
      }
      j += 2;
      continue;
    }
    j++;
  }
  return FAST_FAIL;
}

function digitsFrom(b: Uint8Array, i: number): number {
  while (i < b.length && b[i]! >= 0x30 && b[i]! <= 0x39) i++;
  return i;
}

/** End of the number starting at `i` (Go's grammar), or FAST_FAIL. */
function fastNumber(b: Uint8Array, i: number): number {
  if (b[i] === 0x2d) i++;
  const c = b[i];
  if (c === 0x30) i++;
  else if (c !== undefined && c >= 0x31 && c <= 0x39) i = digitsFrom(b, i + 1);
  else return FAST_FAIL;
  if (b[i] === 0x2e) {
    const j = digitsFrom(b, i + 1);
    if (j === i + 1) return FAST_FAIL;
    i = j;
  }
  if (b[i] === 0x65 || b[i] === 0x45) {
    i++;
    if (b[i] === 0x2b || b[i] === 0x2d) i++;
    const j = digitsFrom(b, i);
    if (j === i) return FAST_FAIL;
    i = j;
  }
  return i;
}

function fastLiteral(b: Uint8Array, i: number, lit: string): number {
  for (let k = 0; k < lit.length; k++) if (b[i + k] !== lit.charCodeAt(k)) return FAST_FAIL;
  return i + lit.length;
}

/**
 * Tight-loop validation of the next value: its end, or FAST_FAIL for anything unusual (a
 * syntax error, EOF inside the value, extreme depth), which the exact Go state machine then explains.
 */
function fastScan(b: Uint8Array, start: number): number {
  let i = start;
  const stack: boolean[] = []; // true = object
  for (;;) {
    // A value at i.
    const c = b[i];
    if (c === 0x7b || c === 0x5b) {
      const isObject = c === 0x7b;
      i = skipWs(b, i + 1);
      if (b[i] === (isObject ? 0x7d : 0x5d)) {
        i++;
      } else {
        if (stack.length >= MAX_NESTING_DEPTH - 1) return FAST_FAIL;
        stack.push(isObject);
        if (isObject) {
          if (b[i] !== 0x22) return FAST_FAIL;
          i = fastString(b, i);
          if (i < 0) return FAST_FAIL;
          i = skipWs(b, i);
          if (b[i] !== 0x3a) return FAST_FAIL;
          i = skipWs(b, i + 1);
        }
        continue;
      }
    } else if (c === 0x22) i = fastString(b, i);
    else if (c === 0x2d || (c !== undefined && c >= 0x30 && c <= 0x39)) i = fastNumber(b, i);
    else if (c === 0x74) i = fastLiteral(b, i, 'true');
    else if (c === 0x66) i = fastLiteral(b, i, 'false');
    else if (c === 0x6e) i = fastLiteral(b, i, 'null');
    else return FAST_FAIL;
    if (i < 0) return FAST_FAIL;
    // After a value: close containers until another value is due.
    for (;;) {
      if (stack.length === 0) return i;
      i = skipWs(b, i);
      const d = b[i];
      const inObject = stack[stack.length - 1]!;
      if (d === 0x2c) {
        i = skipWs(b, i + 1);
        if (inObject) {
          if (b[i] !== 0x22) return FAST_FAIL;
          i = fastString(b, i);
          if (i < 0) return FAST_FAIL;
          i = skipWs(b, i);
          if (b[i] !== 0x3a) return FAST_FAIL;
          i = skipWs(b, i + 1);
        }
        break;
      }
      if (d !== (inObject ? 0x7d : 0x5d)) return FAST_FAIL;
      stack.pop();
      i++;
    }
  }
}

/**
 * What Go's `json.Decoder.Decode` does for the next value in `buf` starting at `pos`: the value's byte
 * range (leading whitespace excluded), clean EOF (only whitespace left), `unexpected EOF`, or a
 * `*json.SyntaxError` whose offset counts bytes from the start of `buf` (the decoder's stream offset).
 */
export function scanJsonValue(buf: Uint8Array, pos: number): JsonValueScan {
  const start = skipWs(buf, pos);
  if (start >= buf.length) return { kind: 'eof' };
  const end = fastScan(buf, start);
  if (end >= 0) return { kind: 'value', start, end };
  return exactScan(buf, pos);
}

function exactScan(buf: Uint8Array, pos: number): JsonValueScan {
  const s = new Scanner();
  const len = buf.length;
  let start = -1;
  let i = pos;
  while (i < len) {
    const c = buf[i]!;
    if (s.state === S_IN_STRING && c !== 0x22 && c !== 0x5c && c >= 0x20) {
      // Fast path: plain string bytes never change state.
      i++;
      continue;
    }
    s.bytes = i + 1;
    const r = s.step(c);
    if (r === SCAN_ERROR) return { kind: 'syntax', message: s.err!, offset: s.errOffset };
    if (r === SCAN_END) return { kind: 'value', start, end: i };
    if (r === SCAN_END_OBJECT_OR_ARRAY && s.stack.length === 0) return { kind: 'value', start, end: i + 1 };
    if (start < 0 && r !== SCAN_SKIP_SPACE) start = i;
    i++;
  }
  if (start < 0) return { kind: 'eof' };
  s.bytes = len;
  // At EOF Go feeds a virtual space: a top-level number/literal/string is then complete.
  if (s.step(0x20) === SCAN_END) return { kind: 'value', start, end: len };
  return { kind: 'unexpected-eof' };
}

/**
 * Go's `json.Unmarshal` syntax check (`checkValid`) of a whole text: the `*json.SyntaxError` message
 * (`unexpected end of JSON input`, `invalid character 't' after top-level value`, ...) or undefined
 * when the text is one valid JSON value.
 */
export function goJsonSyntaxError(text: string | Uint8Array): string | undefined {
  const buf = typeof text === 'string' ? Buffer.from(text, 'utf8') : text;
  const s = new Scanner();
  for (let i = 0; i < buf.length; i++) {
    s.bytes = i + 1;
    if (s.step(buf[i]!) === SCAN_ERROR) return s.err;
  }
  if (s.err !== undefined) return s.err;
  if (s.endTop) return undefined;
  s.step(0x20);
  if (s.endTop) return undefined;
  return s.err ?? 'unexpected end of JSON input';
}
