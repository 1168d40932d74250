import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { Status } from '../grpc-status.js';
import { CmpError, ourError, type OurErrorKind } from '../errors.js';
import type { UntgzOptions, UntgzResult } from './untgz-sync.js';

export interface ExtractJob {
  id: number;
  tgzPath: string;
  dest: string;
  opts: UntgzOptions;
}

export type ExtractReply =
  | ({ id: number; ok: true } & UntgzResult)
  | { id: number; ok: false; message: string; code: Status; kind: OurErrorKind | undefined };

interface Pending {
  job: ExtractJob;
  resolve: (r: UntgzResult) => void;
  reject: (e: Error) => void;
}

const MAX_WORKERS = Math.max(1, Math.min(4, os.availableParallelism()));

/**
 * Starts the worker. Under tsx (tests, development) the entry is a .ts file, which a worker
 * cannot load by itself on Node 20: register tsx's loader inside the worker first.
 */
function startWorker(): Worker {
  const fromSource = fileURLToPath(import.meta.url).endsWith('.ts');
  const entry = new URL(`./extract-worker.${fromSource ? 'ts' : 'js'}`, import.meta.url);
  if (!fromSource) return new Worker(entry);
  const boot = `import('tsx/esm/api').then(m => { m.register(); return import(${JSON.stringify(entry.href)}); })`;
  return new Worker(boot, { eval: true });
}

/**
 * A small pool of extraction worker threads, started on demand and kept (unref'd) while idle
 * so that later extractions skip the start-up cost. A worker that dies fails its job only.
 */
class ExtractPool {
  private readonly idle: Worker[] = [];
  private readonly busy = new Map<Worker, Pending>();
  private readonly queue: Pending[] = [];
  private nextId = 1;

  run(tgzPath: string, dest: string, opts: UntgzOptions): Promise<UntgzResult> {
    return new Promise((resolve, reject) => {
      this.queue.push({ job: { id: this.nextId++, tgzPath, dest, opts }, resolve, reject });
      this.pump();
    });
  }

  /** Start a thread ahead of the first job: a worker scaled from zero should not make its first caller wait for it. */
  warm(): void {
    if (this.idle.length + this.busy.size > 0) return;
    const worker = this.spawn();
    worker.unref();
    this.idle.push(worker);
  }

  private pump(): void {
    while (this.queue.length > 0) {
      const worker = this.idle.pop() ?? (this.busy.size < MAX_WORKERS ? this.spawn() : undefined);
      if (!worker) return;
      const p = this.queue.shift()!;
      this.busy.set(worker, p);
      worker.ref();
      worker.postMessage(p.job);
    }
  }

  private spawn(): Worker {
    const worker = startWorker();
    worker.on('message', (reply: ExtractReply) => {
      const p = this.busy.get(worker);
      if (!p || p.job.id !== reply.id) return;
      this.busy.delete(worker);
      worker.unref();
      this.idle.push(worker);
      if (reply.ok) p.resolve({ files: reply.files, bytes: reply.bytes });
      else p.reject(new CmpError(reply.message, reply.code, reply.kind));
      this.pump();
    });
    const lost = (err: Error) => {
      const p = this.busy.get(worker);
      this.busy.delete(worker);
      const i = this.idle.indexOf(worker);
      if (i >= 0) this.idle.splice(i, 1);
      p?.reject(ourError('extractionCrashed', err.message));
      this.pump();
    };
    worker.on('error', lost);
    worker.on('exit', code => lost(new Error(`exited with code ${code}`)));
    return worker;
  }
}

export const extractPool = new ExtractPool();
