import type { AppPathsRecord, AppPathsStore } from '../../cmp/cache/app-paths.js';
import type { TracedRequest } from '../../cmp/cache/traced-key.js';
import { Status } from '../../cmp/grpc-status.js';
import type { Ctx } from '../../cmp/context.js';
import { codeOf } from '../../cmp/errors.js';
import type { PluginRequest, PluginResult } from '../../cmp/plugin/request.js';
import type { Dispatcher, RepoRef } from '../dispatch/dispatcher.js';
import { fromWire, type PathsOp, type ToCoordinator, type ToIngest, type TracedRef, type WireRepo } from './ipc-messages.js';
import { preparedResult } from '../../cmp/split/prepared.js';

/** Tarballs whose index this process has sent lately (the coordinator asks again if it dropped one). */
const SENT_INDEXES = 256;

/** How the ingest process talks to its coordinator (process.send in a cluster worker). */
export interface Channel {
  send(msg: ToCoordinator): void;
  on(listener: (msg: ToIngest) => void): void;
}

interface Pending {
  resolve(value: PluginResult): void;
  reject(err: unknown): void;
  ctx: Ctx;
  repo: RepoRef;
  /** The dispatch as sent, for a resend with the index. */
  msg: Extract<ToCoordinator, { t: 'dispatch' }>;
  traced: TracedRequest | undefined;
}

/**
 * An ingest process's dispatcher: every request it verified goes to the coordinator, which owns
 * the cache, the coalescing, the concurrency limit and the execution (or the queue), so that
 * all of them are one across processes. The answer, the error (its text and code) and the
 * coordinator's part of the request trace come back; the caller's cancel is passed on.
 */
export class RemoteDispatcher implements Dispatcher {
  readonly paths: AppPathsStore;
  private seq = 0;
  private readonly pending = new Map<number, Pending>();
  private readonly pathCalls = new Map<number, { resolve(v: unknown): void; reject(e: unknown): void }>();
  private readonly sent = new Set<string>();

  constructor(private readonly channel: Channel) {
    channel.on(msg => this.onMessage(msg));
    this.paths = remotePaths((op, args) => this.callPaths(op, args));
  }

  async dispatch(req: PluginRequest, repo: RepoRef, key: string | undefined, ctx: Ctx, traced?: TracedRequest): Promise<PluginResult> {
    const { checksum, size, bytes } = repo;
    const wire: WireRepo = bytes ? { checksum, size, bytes } : { checksum, size, tgzPath: await repo.file() };
    const id = ++this.seq;
    const msg: Extract<ToCoordinator, { t: 'dispatch' }> = {
      t: 'dispatch',
      id,
      req,
      repo: wire,
      key,
      deadline: ctx.deadline,
      span: ctx.trace?.span,
      traced: traced && this.tracedRef(traced, repo.checksum, false),
    };
    return new Promise<PluginResult>((resolve, reject) => {
      this.pending.set(id, { resolve, reject, ctx, repo, msg, traced });
      this.channel.send(msg);
      const onAbort = () => {
        if (this.pending.has(id) && codeOf(ctx.signal.reason) === Status.CANCELLED) this.channel.send({ t: 'cancel', id });
      };
      if (ctx.signal.aborted) onAbort();
      else ctx.signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  private tracedRef(t: TracedRequest, checksum: string, withEntries: boolean): TracedRef {
    const { index, ...rest } = t;
    const send = withEntries || !this.sent.has(checksum);
    if (send) {
      this.sent.add(checksum);
      if (this.sent.size > SENT_INDEXES) this.sent.delete(this.sent.values().next().value!);
    }
    return { ...rest, checksum, ...(send ? { entries: [...index.entries.values()] } : {}) };
  }

  private onMessage(msg: ToIngest): void {
    if (msg.t === 'answer') {
      const p = this.pending.get(msg.id);
      if (!p) return;
      this.pending.delete(msg.id);
      p.ctx.trace?.adopt(msg.trace);
      if (msg.error) p.reject(fromWire(msg.error));
      else {
        // IPC copied the encoding as a Uint8Array: the gRPC server sends it as it is.
        const e = msg.prepared?.encoded;
        p.resolve(msg.prepared && e ? preparedResult({ bytes: msg.prepared.bytes, count: msg.prepared.count, encoded: Buffer.from(e.buffer, e.byteOffset, e.byteLength) }) : msg.result!);
      }
    } else if (msg.t === 'need-index') {
      const p = this.pending.get(msg.id);
      if (!p?.traced) return;
      p.msg = { ...p.msg, traced: this.tracedRef(p.traced, p.repo.checksum, true) };
      this.channel.send(p.msg);
    } else if (msg.t === 'paths') {
      const call = this.pathCalls.get(msg.id);
      if (!call) return;
      this.pathCalls.delete(msg.id);
      if (msg.error) call.reject(fromWire(msg.error));
      else call.resolve(msg.value);
    }
  }

  private callPaths(op: PathsOp, args: unknown[]): Promise<unknown> {
    const id = ++this.seq;
    return new Promise((resolve, reject) => {
      this.pathCalls.set(id, { resolve, reject });
      this.channel.send({ t: 'paths', id, op, args });
    });
  }

  /**
   * Nothing to release: the process closes after its server drained, so nothing is pending. (When
   * the coordinator dies, the cluster module ends this process at once, as a proxy that dies
   * drops its connections.)
   */
  async close(): Promise<void> {}
}

/** The coordinator's store of manifest-generate-paths, called over the channel. */
function remotePaths(call: (op: PathsOp, args: unknown[]) => Promise<unknown>): AppPathsStore {
  return {
    put: record => call('put', [record]) as Promise<void>,
    note: (record, refreshMs) => call('note', [record, refreshMs]) as Promise<boolean>,
    get: app => call('get', [app]) as Promise<AppPathsRecord[]>,
    all: () => call('all', []) as Promise<Map<string, AppPathsRecord[]>>,
  };
}
