import { parentPort } from 'node:worker_threads';
import { manifestsJson, ResponseEncoder } from './prepared.js';
import { ManifestsTooLarge, splitManifests } from './split-manifests.js';
import type { ManifestJob, ManifestReply } from './split-pool.js';

/**
 * A manifest thread (split-pool.ts): one job at a time, a generate command's stdout to split, a
 * stored result's JSON to parse, or an encoding to write as JSON. Manifests are encoded as they
 * come and not kept: what goes back is the ManifestResponse protobuf of them all, their count
 * and bytes (prepared.ts), or the error; the caller's loop never gets them as strings.
 */
parentPort!.on('message', (job: ManifestJob) => {
  const { id } = job;
  const send = (reply: ManifestReply, transfer: ArrayBuffer[] = []) => parentPort!.postMessage(reply, transfer);
  if (job.op === 'tojson') {
    try {
      const json = own(manifestsJson(Buffer.from(job.encoded)));
      return send({ id, end: true, json }, [json]);
    } catch (err) {
      return send({ id, end: true, error: err instanceof Error ? err.message : String(err) });
    }
  }
  const encoder = new ResponseEncoder();
  const emit = (m: string) => encoder.add(m);
  try {
    if (job.op === 'split') {
      splitManifests(Buffer.from(job.stdout), job.maxMessageBytes, emit);
    } else {
      const value = parseResult(Buffer.from(job.json));
      if (value === undefined) return send({ id, end: true, error: 'invalid' });
      if (value.kind !== 'generate') return send({ id, end: true, other: value });
      for (const m of value.manifests as string[]) emit(m);
    }
  } catch (err) {
    if (err instanceof ManifestsTooLarge) return send({ id, end: true, tooLarge: [err.messageBytes, err.maxBytes] });
    return send({ id, end: true, error: err instanceof Error ? err.message : String(err) });
  }
  const encoded = own(encoder.finish());
  send({ id, end: true, bytes: encoder.bytes, count: encoder.count, encoded }, [encoded]);
});

/** A copy of the buffer's bytes to transfer (Node 24 refuses to transfer the memory of some Buffers). */
function own(b: Buffer): ArrayBuffer {
  return new Uint8Array(b).buffer;
}

/** A stored result as decodeResult accepts it: an object with a kind; a generate one with a list of strings. */
function parseResult(json: Buffer): { kind: string; manifests?: unknown } | undefined {
  let v: unknown;
  try {
    v = JSON.parse(json.toString('utf8'));
  } catch {
    return undefined; // not JSON: not a result
  }
  if (!v || typeof v !== 'object' || typeof (v as { kind?: unknown }).kind !== 'string') return undefined;
  const r = v as { kind: string; manifests?: unknown };
  if (r.kind === 'generate' && !(Array.isArray(r.manifests) && r.manifests.every(m => typeof m === 'string'))) return undefined;
  return r;
}
