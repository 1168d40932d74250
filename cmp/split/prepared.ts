// Runs in the manifest threads too (split-thread.ts): imports nothing heavy.

/**
 * A generate answer as prepared off the event loop (split-pool.ts): the ManifestResponse protobuf
 * that carries its manifests, their count and the bytes of their UTF-8 text. A loop that answers
 * holds this, never the manifests as strings: the gRPC server sends the encoding as it is, on a
 * run and on a cache hit, in both modes (a million tiny manifests are a million strings, seconds
 * of a loop's time and 100-200 MiB of heap).
 */
export interface Prepared {
  bytes: number;
  count: number;
  /** ManifestResponse{manifests, sourceType: ""}: field 1 per manifest, field 2 empty (omitted). */
  encoded: Buffer;
  /**
   * The gzip of `encoded` as a Redis entry holds it (result-store.ts), when it was read from
   * one: a copy under another key (a traced entry) is signed anew, not compressed again.
   */
  stored?: Buffer;
}

export type PreparedResult = { kind: 'generate'; manifests: string[] };

const prepared = new WeakMap<object, Prepared>();

/**
 * A generate result that holds only its encoding. Its `manifests` are decoded from it on each
 * read (and not kept: the cache counts the encoding only), for the few who need the strings: a
 * runner's answer, tests. The answering paths use preparedOf instead.
 */
export function preparedResult(p: Prepared): PreparedResult {
  const result = { kind: 'generate' } as PreparedResult;
  Object.defineProperty(result, 'manifests', { enumerable: true, get: () => decodeManifests(p.encoded) });
  prepared.set(result, p);
  return result;
}

/** The encoding a result was prepared with (preparedResult), or undefined for a plain one. */
export function preparedOf(result: object): Prepared | undefined {
  return prepared.get(result);
}

/** Each field 1 (a manifest) of a ManifestResponse as encoded here: [start, end) of its text, in order. */
function* manifestRanges(encoded: Buffer): Generator<[number, number]> {
  let at = 0;
  while (at < encoded.length) {
    if (encoded[at++] !== 0x0a) throw new Error('not a ManifestResponse of manifests');
    let len = 0;
    for (let shift = 1; ; shift *= 0x80) {
      const b = encoded[at++];
      if (b === undefined) throw new Error('truncated ManifestResponse');
      len += (b & 0x7f) * shift;
      if (b < 0x80) break;
    }
    if (at + len > encoded.length) throw new Error('truncated ManifestResponse');
    yield [at, at + len];
    at += len;
  }
}

/**
 * The count and bytes of the manifests of a ManifestResponse as ResponseEncoder writes it (field 1
 * only); undefined for anything else. No strings made. Their text is UTF-8 from
 * the encoder (what reaches here is signed by our own services, result-store.ts).
 */
export function manifestsSummary(encoded: Buffer): { count: number; bytes: number } | undefined {
  // manifestRanges without its generator: one pass over a million fields in a few milliseconds.
  let count = 0;
  let bytes = 0;
  let at = 0;
  while (at < encoded.length) {
    if (encoded[at++] !== 0x0a) return undefined;
    let len = 0;
    for (let shift = 1; ; shift *= 0x80) {
      if (at >= encoded.length || shift > 2 ** 28) return undefined;
      const b = encoded[at++]!;
      len += (b & 0x7f) * shift;
      if (b < 0x80) break;
    }
    if (at + len > encoded.length) return undefined;
    at += len;
    bytes += len;
    count++;
  }
  return { count, bytes };
}

/** The manifests of a ManifestResponse encoded by ResponseEncoder. */
export function decodeManifests(encoded: Buffer): string[] {
  const out: string[] = [];
  for (const [a, b] of manifestRanges(encoded)) out.push(encoded.toString('utf8', a, b));
  return out;
}

/**
 * Whether some manifest's UTF-8 text contains `value`'s (a substring test on the strings, for
 * well-formed text). One search of the whole encoding; a match is checked to lie within one
 * manifest only when there is one, by a walk over the fields up to it.
 */
export function someManifestIncludes(encoded: Buffer, value: string): boolean {
  const v = Buffer.from(value, 'utf8');
  let pos = encoded.indexOf(v);
  if (pos < 0) return false;
  if (v.length === 0) return encoded.length > 0;
  const ranges = manifestRanges(encoded);
  let range = ranges.next();
  while (pos >= 0) {
    while (!range.done && range.value[1] <= pos) range = ranges.next();
    if (range.done) return false;
    const [a, b] = range.value;
    if (pos >= a && pos + v.length <= b) return true;
    pos = encoded.indexOf(v, Math.max(pos + 1, a));
  }
  return false;
}

/**
 * The JSON of a result's manifests, as JSON.stringify writes a list of strings, built from
 * their encoding one manifest at a time (in a thread: split-thread.ts).
 */
export function manifestsJson(encoded: Buffer): Buffer {
  const parts: Buffer[] = [];
  let chunk = '[';
  for (const [a, b] of manifestRanges(encoded)) {
    chunk += `${chunk === '[' && parts.length === 0 ? '' : ','}${JSON.stringify(encoded.toString('utf8', a, b))}`;
    if (chunk.length < 1024 * 1024) continue;
    parts.push(Buffer.from(chunk, 'utf8'));
    chunk = '';
  }
  parts.push(Buffer.from(`${chunk}]`, 'utf8'));
  return Buffer.concat(parts);
}

/** Builds the ManifestResponse protobuf of manifests handed over one by one. */
export class ResponseEncoder {
  private readonly parts: Buffer[] = [];
  private part = Buffer.allocUnsafe(64 * 1024);
  private used = 0;
  bytes = 0;
  count = 0;

  add(manifest: string): void {
    const text = Buffer.from(manifest, 'utf8');
    this.bytes += text.length;
    this.count++;
    const head = Buffer.allocUnsafe(6);
    let n = 0;
    head[n++] = 0x0a;
    for (let v = text.length; ; ) {
      if (v < 0x80) {
        head[n++] = v;
        break;
      }
      head[n++] = (v & 0x7f) | 0x80;
      v = Math.floor(v / 0x80);
    }
    this.write(head.subarray(0, n));
    this.write(text);
  }

  private write(b: Buffer): void {
    if (this.used + b.length > this.part.length) {
      this.parts.push(this.part.subarray(0, this.used));
      this.part = Buffer.allocUnsafe(Math.max(64 * 1024, b.length));
      this.used = 0;
    }
    b.copy(this.part, this.used);
    this.used += b.length;
  }

  finish(): Buffer {
    this.parts.push(this.part.subarray(0, this.used));
    return Buffer.concat(this.parts);
  }
}
