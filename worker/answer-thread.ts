import { parentPort } from 'node:worker_threads';
import { encodeAnswer } from '../runner/answer.js';
import type { DecodeJob, DecodeReply } from './answer-decoder.js';

/**
 * The answer decoder's thread (answer-decoder.ts): checks one runner answer at a time and, for
 * a result, sends back its encoding (a generate result's ManifestResponse, another's JSON)
 * re-encoded from the checked value, as bytes it transfers.
 */
parentPort!.on('message', (job: DecodeJob) => {
  const { reply, transfer } = decode(job);
  parentPort!.postMessage(reply, transfer);
});

function decode({ id, payload, bounds }: DecodeJob): { reply: DecodeReply; transfer: ArrayBuffer[] } {
  const encoded = encodeAnswer(Buffer.from(payload), bounds);
  const bytes = 'json' in encoded ? encoded.json : 'encoded' in encoded ? encoded.encoded : undefined;
  return { reply: { id, ...encoded }, transfer: bytes ? [bytes.buffer as ArrayBuffer] : [] };
}
