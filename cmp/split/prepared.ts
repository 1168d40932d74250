// Runs in the manifest threads too (split-thread.ts): imports nothing heavy.

/**
 * A generate answer's manifests as prepared off the event loop (split-pool.ts): the bytes of
 * their UTF-8 text and the ManifestResponse protobuf that carries them, so that the loop that
 * answers neither measures nor encodes a million of them again (and a cache hit reuses both).
 */
export interface Prepared {
  bytes: number;
  /** ManifestResponse{manifests, sourceType: ""}: field 1 per manifest, field 2 empty (omitted). */
  encoded: Buffer;
}

const prepared = new WeakMap<string[], Prepared>();

export function prepare(manifests: string[], p: Prepared): string[] {
  prepared.set(manifests, p);
  return manifests;
}

export function preparedOf(manifests: string[]): Prepared | undefined {
  return prepared.get(manifests);
}

/** Builds the ManifestResponse protobuf of manifests handed over one by one. */
export class ResponseEncoder {
  private readonly parts: Buffer[] = [];
  private part = Buffer.allocUnsafe(64 * 1024);
  private used = 0;
  bytes = 0;

  add(manifest: string): void {
    const text = Buffer.from(manifest, 'utf8');
    this.bytes += text.length;
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
