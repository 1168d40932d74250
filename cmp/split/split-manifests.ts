// Argo CD's `kube.SplitYAMLToString`: apimachinery's YAMLOrJSONDecoder(reader, 4096) decoding
// RawExtensions until EOF (docs/argo-contract.md#splitting-manifests).
import { scanJsonValue } from '../go/go-json-scanner.js';
import { EncodeLimit, goJsonByteLength, goJsonMarshal } from '../go/go-json-encode.js';
import type { GoValue } from '../go/go-values.js';
import { convertYamlText } from '../go/yaml-to-json.js';
import { readYamlText } from '../go/yaml-reader-check.js';

const SNIFF_BYTES = 4096;
const PREFIX = 'failed to unmarshal manifest: ';
const NL_DASHES = Buffer.from('\n---');

/** Decodes one UTF-8 rune at `i` like Go's utf8.DecodeRune: [rune, size], rune -1 when invalid. */
function decodeRune(buf: Uint8Array, i: number, end: number): [number, number] {
  const b = buf[i]!;
  if (b < 0x80) return [b, 1];
  const width = b >= 0xf0 && b <= 0xf4 ? 4 : b >= 0xe0 ? (b <= 0xef ? 3 : -1) : b >= 0xc2 ? 2 : -1;
  if (width < 0 || i + width > end) return [-1, 1];
  let v = width === 2 ? b & 0x1f : width === 3 ? b & 0x0f : b & 0x07;
  for (let k = 1; k < width; k++) {
    const o = buf[i + k]!;
    if ((o & 0xc0) !== 0x80) return [-1, 1];
    v = (v << 6) | (o & 0x3f);
  }
  const min = width === 2 ? 0x80 : width === 3 ? 0x800 : 0x10000;
  if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return [-1, 1];
  return [v, width];
}

/** Go's unicode.IsSpace. */
function isUnicodeSpace(r: number): boolean {
  if (r <= 0xff) return r === 0x20 || (r >= 0x09 && r <= 0x0d) || r === 0x85 || r === 0xa0;
  return r === 0x1680 || (r >= 0x2000 && r <= 0x200a) || r === 0x2028 || r === 0x2029 || r === 0x202f || r === 0x205f || r === 0x3000;
}

/** GuessJSONStream: within the first 4096 bytes, is the first non-space rune `{`? */
function looksLikeJson(buf: Uint8Array): boolean {
  const end = Math.min(buf.length, SNIFF_BYTES);
  let i = 0;
  while (i < end) {
    const [r, size] = decodeRune(buf, i, end);
    if (r < 0 || !isUnicodeSpace(r)) return r === 0x7b;
    i += size;
  }
  return false;
}

/**
 * YAMLOrJSONDecoder.consumeWhitespace after rewinding to `pos`: skips Unicode spaces up to and including
 * the first newline. Undefined when it gives up — it reads 4 bytes at a time and treats a short read (fewer
 * than 4 bytes left) or an invalid rune as failure, in which case the JSON error stands.
 */
function consumeWhitespace(buf: Uint8Array, pos: number): number | undefined {
  let i = pos;
  for (;;) {
    if (buf.length - i < 4) return undefined;
    const [r, size] = decodeRune(buf, i, i + 4);
    // Go compares against utf8.RuneError, so a literal U+FFFD also stops it.
    if (r < 0 || r === 0xfffd) return undefined;
    if (!isUnicodeSpace(r)) return i;
    if (r === 0x0a) return i + 1;
    i += size;
  }
}

const GO_SPACE = /[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/;

/** Go's strings.TrimSpace (JS trim() also strips U+FEFF and keeps U+0085). */
function goTrimSpace(s: string): string {
  let a = 0;
  let b = s.length;
  while (a < b && GO_SPACE.test(s[a]!)) a++;
  while (b > a && GO_SPACE.test(s[b - 1]!)) b--;
  return a === 0 && b === s.length ? s : s.slice(a, b);
}

/** apimachinery's YAMLReader: yields document chunks split on `---` lines (docs/argo-contract.md#yaml-documents). */
class YamlChunks {
  constructor(
    private readonly buf: Buffer,
    private pos: number,
  ) {}

  private lineEnd(start: number): number {
    const nl = this.buf.indexOf(0x0a, start);
    return nl < 0 ? this.buf.length : nl;
  }

  /** The next line at or after `from` (a line start) that begins with `---`, or -1. */
  private nextDashLine(from: number): number {
    const b = this.buf;
    if (b[from] === 0x2d && b[from + 1] === 0x2d && b[from + 2] === 0x2d) return from;
    const i = b.indexOf(NL_DASHES, from);
    return i < 0 ? -1 : i + 1;
  }

  /** Throws for a `---` line followed by anything but spaces or a comment. */
  private checkSeparator(lineStart: number): void {
    const rest = goTrimSpace(this.buf.toString('utf8', lineStart + 3, this.lineEnd(lineStart)));
    if (rest !== '' && rest[0] !== '#') throw new Error(`invalid Yaml document separator: ${rest}`);
  }

  /** The next chunk's bytes (CRLF → LF, final newline added), or undefined at EOF. */
  next(): string | undefined {
    const start = this.pos;
    const len = this.buf.length;
    if (start >= len) return undefined;
    let sep = this.nextDashLine(start);
    if (sep === start) {
      // A separator with nothing buffered yet becomes part of the chunk (Go writes the line).
      this.checkSeparator(start);
      const end = this.lineEnd(start);
      sep = end >= len ? -1 : this.nextDashLine(end + 1);
    }
    let chunkEnd: number;
    if (sep < 0) {
      chunkEnd = len;
      this.pos = len;
    } else {
      this.checkSeparator(sep);
      chunkEnd = sep;
      this.pos = this.lineEnd(sep) + 1;
    }
    const read = readYamlText(this.buf.subarray(start, chunkEnd));
    if ('error' in read) throw new Error(`error converting YAML to JSON: yaml: ${read.error}`);
    let text = read.text;
    if (text.includes('\r\n')) text = text.replaceAll('\r\n', '\n');
    if (!text.endsWith('\n')) text += '\n';
    return text;
  }
}

/**
 * The manifests of one split, with the size of the ManifestResponse they make: once that is over
 * the message size limit, no more text is built (the answer cannot be sent anyway); the rest of
 * the output is still decoded, for its errors, and measured, for the size grpc reports.
 */
class Manifests {
  list: string[] = [];
  /** Protobuf bytes of ManifestResponse{manifests: list} (field 1, length-delimited each). */
  bytes = 0;
  over = false;
  private readonly measured = new Map<object | string, number>();

  /** `emit`: manifests are handed over as they come (and none are kept) instead of listed. */
  constructor(
    private readonly maxBytes: number,
    private readonly emit?: (manifest: string) => void,
  ) {}

  /** A raw JSON value (JSON mode): kept trimmed unless empty or `null`. */
  addRaw(raw: string): void {
    const t = goTrimSpace(raw);
    if (t !== '' && t !== 'null') this.add(t, Buffer.byteLength(t));
  }

  /** A YAML document's value; `null` is dropped (its JSON would be `null`). */
  addValue(v: GoValue): void {
    if (v === null) return;
    if (this.over) return this.count(goJsonByteLength(v, this.measured));
    let text: string;
    try {
      // A UTF-16 code unit is at least one UTF-8 byte: longer than this, it is over for sure.
      text = goJsonMarshal(v, this.maxBytes - this.bytes);
    } catch (err) {
      if (!(err instanceof EncodeLimit)) throw err;
      return this.count(goJsonByteLength(v, this.measured));
    }
    this.add(text, Buffer.byteLength(text));
  }

  private add(text: string, bytes: number): void {
    this.count(bytes);
    if (this.over) return;
    if (this.emit) this.emit(text);
    else this.list.push(text);
  }

  private count(bytes: number): void {
    this.bytes += 1 + varintBytes(bytes) + bytes;
    if (!this.over && this.bytes > this.maxBytes) {
      this.over = true;
      this.list = [];
    }
  }
}

function varintBytes(n: number): number {
  let k = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 0x80);
    k++;
  }
  return k;
}

/** Converts the next YAML chunk into `out`; false at EOF. Mirrors YAMLToJSONDecoder.Decode into RawExtension. */
function nextYamlDoc(chunks: YamlChunks, out: Manifests): boolean {
  const text = chunks.next();
  if (text === undefined) return false;
  convertYamlText(text, v => out.addValue(v));
  return true;
}

function yamlRest(out: Manifests, chunks: YamlChunks): Manifests {
  while (nextYamlDoc(chunks, out));
  return out;
}

/**
 * The manifests a ManifestResponse would carry are more than the message size limit allows:
 * `messageBytes` is the framed message (5-byte gRPC prefix and protobuf) as grpc-js counts it.
 */
export class ManifestsTooLarge extends Error {
  constructor(
    readonly messageBytes: number,
    readonly maxBytes: number,
  ) {
    super(`the manifests make a ${messageBytes}-byte message, more than ${maxBytes}`);
  }
}

/**
 * Argo CD's `kube.SplitYAMLToString` on a generate command's stdout: one string per manifest. A stream
 * whose first non-space byte (within 4096 bytes) is `{` is read as concatenated JSON values passed
 * through verbatim, with apimachinery's fallback to YAML; otherwise `---`-separated YAML documents are
 * each converted to Go-compatible JSON. Empty and `null` documents are dropped. Errors are thrown with
 * the full Go text, starting `failed to unmarshal manifest: `.
 *
 * `maxMessageBytes` (ARGOCD_GRPC_MAX_SIZE_MB): when the ManifestResponse of these manifests would
 * be larger, ManifestsTooLarge is thrown instead (after the whole output was checked for errors, as
 * Go splits it whole before sending), and the text of no manifest past the limit is built. YAML
 * aliases therefore cost what their text costs, not what they expand to.
 *
 * With `emit`, each manifest is handed to it as soon as it is made and none is returned; the
 * caller drops what it got if the split then throws.
 */
export function splitManifests(stdout: Buffer, maxMessageBytes = Infinity, emit?: (manifest: string) => void): string[] {
  let out: Manifests;
  try {
    out = split(stdout, new Manifests(maxMessageBytes, emit));
  } catch (err) {
    throw new Error(PREFIX + (err instanceof Error ? err.message : String(err)));
  }
  if (out.over) throw new ManifestsTooLarge(5 + out.bytes, maxMessageBytes);
  return out.list;
}

function split(buf: Buffer, out: Manifests): Manifests {
  if (!looksLikeJson(buf)) return yamlRest(out, new YamlChunks(buf, 0));
  let count = 0;
  let pos = 0;
  for (;;) {
    const r = scanJsonValue(buf, pos);
    if (r.kind === 'eof') return out;
    if (r.kind === 'value') {
      count++;
      out.addRaw(buf.toString('utf8', r.start, r.end));
      pos = r.end;
      continue;
    }
    const raw = r.kind === 'syntax' ? r.message : 'unexpected EOF';
    // ≥ 2 values: an unambiguous JSON stream, the plain Go error stands.
    if (count > 1) throw new Error(raw);
    const jsonErr = r.kind === 'syntax' ? `json: offset ${r.offset}: ${r.message}` : raw;
    const yamlStart = consumeWhitespace(buf, pos);
    if (yamlStart === undefined) throw new Error(jsonErr);
    const chunks = new YamlChunks(buf, yamlStart);
    let more: boolean;
    try {
      more = nextYamlDoc(chunks, out);
    } catch {
      throw new Error(jsonErr);
    }
    if (!more) return out;
    return yamlRest(out, chunks);
  }
}
