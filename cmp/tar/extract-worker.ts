import { parentPort } from 'node:worker_threads';
import { CmpError, codeOf, messageOf } from '../errors.js';
import { untgzSync } from './untgz-sync.js';
import type { ExtractJob, ExtractReply } from './extract-pool.js';

// Worker-thread entry: runs extractions one at a time with synchronous fs calls, which are
// several times faster than per-file async ones and never block the main event loop.
parentPort!.on('message', (job: ExtractJob) => {
  let reply: ExtractReply;
  try {
    reply = { id: job.id, ok: true, ...untgzSync(job.tgzPath, job.dest, job.opts) };
  } catch (err) {
    reply = { id: job.id, ok: false, message: messageOf(err), code: codeOf(err), kind: err instanceof CmpError ? err.kind : undefined };
  }
  parentPort!.postMessage(reply);
});
