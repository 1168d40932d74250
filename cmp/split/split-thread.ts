import { parentPort } from 'node:worker_threads';
import { ResponseEncoder } from './prepared.js';
import { ManifestsTooLarge, splitManifests } from './split-manifests.js';
import type { ManifestJob, ManifestReply } from './split-pool.js';

/** Manifests per message back: each one's deserialisation is a short task on the caller's loop. */
const BATCH = 4096;

/**
 * A manifest thread (split-pool.ts): one job at a time, a generate command's stdout to split or
 * a stored result's JSON to parse. Manifests go back in batches as they come (this thread never
 * holds all of a large answer's strings), then the end: the ManifestResponse protobuf of them
 * all and their bytes, or the error.
 */
parentPort!.on('message', (job: ManifestJob) => {
  const { id } = job;
  const send = (reply: ManifestReply, transfer: ArrayBuffer[] = []) => parentPort!.postMessage(reply, transfer);
  const encoder = new ResponseEncoder();
  let batch: string[] = [];
  const emit = (m: string) => {
    encoder.add(m);
    batch.push(m);
    if (batch.length < BATCH) return;
    send({ id, end: false, manifests: batch });
    batch = [];
  };
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
  if (batch.length > 0) send({ id, end: false, manifests: batch });
  const encoded = encoder.finish();
  const own = new Uint8Array(encoded).buffer;
  send({ id, end: true, bytes: encoder.bytes, encoded: own }, [own]);
});

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
