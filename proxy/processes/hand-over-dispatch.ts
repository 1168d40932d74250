import { contextWithDeadline, type CtxHandle } from '../../cmp/context.js';
import type { TracedRequest } from '../../cmp/cache/traced-key.js';
import { RequestTrace } from '../../cmp/observe/request-trace.js';
import { traceableIndexOf } from '../../cmp/tar/tree-index.js';
import type { Dispatcher, RepoRef } from '../dispatch/dispatcher.js';
import { copyOnDemand, type SpoolStore } from '../ingest/spool-store.js';
import { IndexMemo } from '../ingest/index-memo.js';
import { toWire, type ToCoordinator, type ToIngest, type WireRepo } from './ipc-messages.js';
import { preparedOf } from '../../cmp/split/prepared.js';

/** One ingest process as the coordinator sees it. */
export interface Peer {
  readonly id: number;
  send(msg: ToIngest): void;
}

/**
 * The coordinator's side of the hand-over: each request an ingest process verified is dispatched
 * here, through the one dispatcher of the proxy (its cache, coalescing, concurrency limit and
 * queue), under the caller's deadline; the answer goes back with this process's part of the
 * request trace. The tree indexes traced requests need are kept by tarball sha256, in a memo
 * of CMP_OFFLOAD_INDEX_MEMO_BYTES like each ingest process's.
 */
export class HandOvers {
  private readonly running = new Map<string, CtxHandle>();
  private readonly answering = new Set<Promise<void>>();
  private readonly memo: IndexMemo;

  constructor(
    private readonly dispatcher: Dispatcher,
    memoBytes: number,
    /** Where a tarball that came in memory is written when a run needs its file. */
    private readonly spools: SpoolStore,
  ) {
    this.memo = new IndexMemo(memoBytes);
  }

  /** Requests being answered now. */
  get size(): number {
    return this.running.size;
  }

  onMessage(from: Peer, msg: ToCoordinator): void {
    switch (msg.t) {
      case 'dispatch':
        return this.dispatch(from, msg);
      case 'cancel':
        return this.running.get(`${from.id}/${msg.id}`)?.cancel();
      case 'paths': {
        const store = this.dispatcher.paths as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
        void Promise.resolve()
          .then(() => store[msg.op]!(...msg.args))
          .then(
            value => from.send({ t: 'paths', id: msg.id, value }),
            err => from.send({ t: 'paths', id: msg.id, error: toWire(err) }),
          );
        return;
      }
    }
  }

  /** Resolves when every request handed over so far is answered (shutdown). */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.answering]);
  }

  /** An ingest process is gone: its callers are too, so their runs are cancelled (shared runs go on for the others). */
  peerGone(from: Peer): void {
    for (const [key, ctx] of this.running) if (key.startsWith(`${from.id}/`)) ctx.cancel();
  }

  private dispatch(from: Peer, msg: Extract<ToCoordinator, { t: 'dispatch' }>): void {
    let traced: TracedRequest | undefined;
    if (msg.traced) {
      const { checksum, entries, ...rest } = msg.traced;
      let index = this.memo.peek(checksum);
      if (!index && entries) {
        try {
          index = traceableIndexOf(entries);
        } catch (err) {
          return from.send({ t: 'answer', id: msg.id, error: toWire(err), trace: { stagesMs: {} } });
        }
      }
      if (!index) return from.send({ t: 'need-index', id: msg.id });
      this.memo.remember(checksum, index);
      traced = { ...rest, index };
    }
    const key = `${from.id}/${msg.id}`;
    const ctx = contextWithDeadline(msg.deadline, 0);
    const trace = new RequestTrace();
    if (msg.span) {
      // A recorded request collects this process's stages for its ingest process; one the
      // sampler dropped only carries its context (and decision) into a job.
      trace.span = msg.span;
      if (msg.span.sampled) trace.stageSpans = [];
    }
    this.running.set(key, ctx);
    const repo = repoOf(msg.repo, this.spools);
    const answered = this.dispatcher
      .dispatch(msg.req, repo, msg.key, { signal: ctx.signal, deadline: ctx.deadline, trace }, traced)
      .then(
        result => {
          const prepared = preparedOf(result);
          // Cloning the result would read (decode) its manifests: the encoding crosses instead.
          return prepared ? { prepared: { bytes: prepared.bytes, count: prepared.count, encoded: prepared.encoded } } : { result };
        },
        err => ({ error: toWire(err) }),
      )
      .then(async out => {
        await repo.release();
        ctx.dispose();
        this.running.delete(key);
        from.send({ t: 'answer', id: msg.id, ...out, trace: trace.part() });
      });
    this.answering.add(answered);
    void answered.finally(() => this.answering.delete(answered));
  }
}

/** The dispatcher's view of a tarball handed over: one in memory is written here when a run needs a file. */
function repoOf(wire: WireRepo, spools: SpoolStore): RepoRef & { release(): Promise<void> } {
  if ('tgzPath' in wire) {
    const file = Promise.resolve(wire.tgzPath);
    return { checksum: wire.checksum, size: wire.size, file: () => file, release: () => Promise.resolve() };
  }
  return { checksum: wire.checksum, size: wire.size, bytes: wire.bytes, ...copyOnDemand(spools, wire.checksum, wire.bytes) };
}
