import { parentPort } from 'node:worker_threads';
import { checkAnswer } from './answer.js';
import type { DecodeJob, DecodeReply } from './answer-decoder.js';
import { ProtocolError } from './protocol.js';

/**
 * The answer decoder's thread (answer-decoder.ts): checks one runner answer at a time and, for
 * a result, sends back its JSON re-encoded from the checked value, as bytes it transfers.
 */
parentPort!.on('message', (job: DecodeJob) => {
  const { reply, transfer } = decode(job);
  parentPort!.postMessage(reply, transfer);
});

function decode({ id, payload, bounds }: DecodeJob): { reply: DecodeReply; transfer: ArrayBuffer[] } {
  try {
    const a = checkAnswer(Buffer.from(payload), bounds);
    if (!a.ok) return { reply: { id, ...a }, transfer: [] };
    const json = new TextEncoder().encode(JSON.stringify(a.result));
    let manifestBytes = 0;
    if (a.result.kind === 'generate') for (const m of a.result.manifests) manifestBytes += Buffer.byteLength(m);
    return { reply: { id, ok: true, json, manifestBytes, reads: a.reads, stages: a.stages, spans: a.spans }, transfer: [json.buffer] };
  } catch (err) {
    // Our words only: JSON.parse's own messages quote the input.
    const refused = err instanceof ProtocolError ? err.message : `the answer could not be decoded (${(err as Error).name})`;
    return { reply: { id, refused }, transfer: [] };
  }
}
