import { createHash } from 'node:crypto';
import fs from 'node:fs';
import { status as Status } from '@grpc/grpc-js';
import type { Ctx } from '../../cmp/context.js';
import { CmpError, messageOf, wrap, ourError } from '../../cmp/errors.js';
import { metrics } from '../../cmp/observe/metrics.js';
import { TreeIndexer, type TreeIndex } from '../../cmp/tar/tree-index.js';
import type { AppStreamRequest, ManifestRequestMetadata } from '../../proto/generated/cmpserver/plugin/plugin.js';
import type { IndexMemo } from './index-memo.js';
import { copyOnDemand, type SpoolLease, type SpoolStore } from './spool-store.js';

/** The slice of a grpc-js client-streaming call that ingest reads from. */
export interface RepoStream {
  on(event: 'data', listener: (msg: AppStreamRequest) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
  off(event: string, listener: (...args: any[]) => void): unknown;
  pause(): unknown;
  resume(): unknown;
}

export interface IngestOptions {
  ctx: Ctx;
  /**
   * Where the raw tarball is spooled (mode 0600) when it outgrows the receive buffer; the caller
   * removes it after the request (`spooled` says whether it was made).
   */
  tgzPath: string;
  /** Told once the spool file at `tgzPath` is being written. */
  spooled?: () => void;
  /** The RPC's prefix for the error of a tarball in memory that cannot be written when a run needs it. */
  receiveText?: string;
  /** Indexes of tarballs ingested lately: a tarball found there is only hashed. */
  memo: IndexMemo;
  /** The shared copies of tarballs in use or kept: a tarball found there is not spooled again. */
  spools: SpoolStore;
  maxTarballBytes: number;
  maxExtractedBytes: number;
  maxEntries: number;
}

export interface IngestedRepo {
  metadata: ManifestRequestMetadata;
  /** sha256 hex of the gzip bytes, verified equal to metadata.checksum. */
  checksum: string;
  size: number;
  /** The whole tarball when it fit in the receive buffer and no shared copy existed. */
  bytes?: Buffer;
  /** The shared copy of the tarball, written to the spool store on first use when in memory. */
  file(): Promise<string>;
  /** The tree as the tarball describes it, or undefined when it could not be indexed. */
  index: TreeIndex | undefined;
  /** Let go of the tarball (the request is done with it). */
  release(): Promise<void>;
}

/**
 * The receive buffer: the repo-server's default chunk is 1 KiB, so spool writes are batched, and
 * a tarball that ends within one batch is never written unless a run needs a file (a cache hit
 * touches no disk).
 */
const SPOOL_BATCH_BYTES = 256 * 1024;

/**
 * Receive one repo stream (docs/argo-contract.md#the-repo-stream): metadata first, then file chunks until the client
 * half-closes. While reading: sha256 of the bytes, the streaming tree index (gunzip + tar parse),
 * and the bytes kept in a buffer of SPOOL_BATCH_BYTES: a tarball that fits stays in memory until
 * the request ends, a larger one is spooled to disk. Memory stays bounded: the call is paused
 * while the spool file drains.
 *
 * A known tarball (its claimed checksum names a remembered index) is only hashed: no tree index
 * is built. Nothing is spooled while the spool store holds a copy of it (a request in flight
 * holds it, or it is kept). The remembered index and the copy are used only when the bytes hash
 * to that checksum; otherwise the answer is
 * the checksum error, as for any stream. Only a verified ingest with a complete index is
 * remembered, under the digest computed here.
 *
 * Our deliberate difference (docs/argo-contract.md#deliberate-differences): when an error is detected while receiving, the
 * rest of the stream is read and discarded (up to the tarball limit) and the error is reported
 * only after the client half-closes, so the repo-server sees the real status instead of EOF.
 * Errors carry the texts of Argo's ReceiveRepoStream; the RPC prefix is added by the caller.
 */
export function receiveRepoStream(stream: RepoStream, opts: IngestOptions): Promise<IngestedRepo> {
  return new Promise((resolve, reject) => new RepoStreamReceiver(stream, opts, resolve, reject).listen());
}

/** One repo stream being received: what has come so far, and where its bytes go. */
class RepoStreamReceiver {
  private readonly stream: RepoStream;
  private readonly opts: IngestOptions;
  private readonly resolve: (repo: IngestedRepo) => void;
  private readonly reject: (err: CmpError) => void;
  private metadata: ManifestRequestMetadata | undefined;
  /** The first error: answered once the stream is drained, or at once. */
  private failure: CmpError | undefined;
  private settled = false;
  private received = 0;
  private readonly hash = createHash('sha256');
  private indexer: TreeIndexer | undefined;
  /** The remembered index the claimed checksum names: a hint until the digest matches. */
  private known: TreeIndex | undefined;
  /** The shared copy of a known tarball, held from the metadata on. */
  private lease: SpoolLease | undefined;
  private spool: fs.WriteStream | undefined;
  private batch: Buffer[] = [];
  private batchBytes = 0;

  constructor(stream: RepoStream, opts: IngestOptions, resolve: (repo: IngestedRepo) => void, reject: (err: CmpError) => void) {
    this.stream = stream;
    this.opts = opts;
    this.resolve = resolve;
    this.reject = reject;
  }

  listen(): void {
    this.opts.ctx.signal.addEventListener('abort', this.onAbort, { once: true });
    this.stream.on('data', this.onData);
    this.stream.on('error', this.onError);
    this.stream.on('end', this.onEnd);
  }

  private finish(err: CmpError | undefined, value?: IngestedRepo): void {
    if (this.settled) return;
    this.settled = true;
    const { stream } = this;
    // Only ingest's own listeners: the RPC's 'cancelled' listener must outlive ingest, or a
    // caller's cancel after the upload would no longer stop the run.
    stream.off('data', this.onData);
    stream.off('end', this.onEnd);
    stream.off('error', this.onError);
    this.opts.ctx.signal.removeEventListener('abort', this.onAbort);
    // Keep an 'error' listener: a late stream error must not crash the process.
    stream.on('error', () => {});
    if (err) {
      this.discardSpool();
      void this.indexer?.end().catch(() => {}); // the stream's own error is the one answered
      // The lease may be the last on its file: it is gone before the answer.
      void (this.lease?.release() ?? Promise.resolve()).then(() => this.reject(err));
    } else this.resolve(value!);
  }

  /** Record the first error; keep draining unless it must be answered at once. */
  private fail(err: CmpError, now = false): void {
    this.failure ??= err;
    this.discardSpool();
    if (now) this.finish(this.failure);
  }

  /** Drop the spool file: its late errors mean nothing now, and a pending drain never comes. */
  private discardSpool(): void {
    const { spool } = this;
    if (!spool) return;
    spool.removeAllListeners();
    spool.on('error', () => {});
    spool.destroy();
    this.spool = undefined;
    this.stream.resume();
  }

  /** The spool file, opened when the tarball outgrows the buffer. */
  private openSpool(): fs.WriteStream {
    const file = fs.createWriteStream(this.opts.tgzPath, { mode: 0o600, flags: 'wx', highWaterMark: 4 * SPOOL_BATCH_BYTES });
    file.on('error', err => this.fail(new CmpError(`error receiving tgz file: error writing tgz file: ${messageOf(err)}`), true));
    this.opts.spooled?.();
    return file;
  }

  /** The buffered chunks as one buffer; the buffer is empty after. */
  private takeBatch(): Buffer {
    const buf = this.batch.length === 1 ? this.batch[0]! : Buffer.concat(this.batch, this.batchBytes);
    this.batch = [];
    this.batchBytes = 0;
    return buf;
  }

  private flush(): void {
    if (this.batchBytes === 0) return;
    const spool = (this.spool ??= this.openSpool());
    if (!spool.write(this.takeBatch())) {
      this.stream.pause();
      spool.once('drain', () => this.stream.resume());
    }
  }

  private readonly onAbort = (): void => {
    const reason = this.opts.ctx.signal.reason as CmpError;
    this.fail(wrap('error receiving tgz file: stream context error', reason), true);
  };

  private readonly onData = (msg: AppStreamRequest): void => {
    if (this.failure) {
      this.received += msg.file?.chunk.length ?? 0;
      if (this.received > this.opts.maxTarballBytes) this.finish(this.failure);
      return;
    }
    if (!this.metadata) return this.onMetadata(msg);
    this.onChunk(msg);
  };

  private onMetadata(msg: AppStreamRequest): void {
    const { opts } = this;
    if (!msg.metadata) return this.fail(new CmpError('error getting stream metadata: metadata is nil'));
    const metadata = (this.metadata = msg.metadata);
    this.known = opts.memo.peek(metadata.checksum);
    // A copy held or kept under the claimed checksum: a hint until the digest matches.
    this.lease = opts.spools.acquire(metadata.checksum);
    if (!this.known) this.indexer = new TreeIndexer({ maxExtractedBytes: opts.maxExtractedBytes, maxEntries: opts.maxEntries });
    // Go checks ctx before every Recv after the header: a context that was done before the
    // call began (no 'abort' event then) fails here, as it does when it ends mid-stream.
    if (opts.ctx.signal.aborted) this.onAbort();
  }

  private onChunk(msg: AppStreamRequest): void {
    if (!msg.file) return this.fail(new CmpError('error receiving tgz file: stream request file is nil'));
    const { chunk } = msg.file;
    this.received += chunk.length;
    if (this.received > this.opts.maxTarballBytes) {
      return this.fail(wrap('error receiving tgz file', ourError('tarballTooLarge', this.opts.maxTarballBytes)), true);
    }
    this.hash.update(chunk);
    this.indexer?.write(chunk);
    if (this.lease) return;
    this.batch.push(chunk);
    this.batchBytes += chunk.length;
    if (this.batchBytes >= SPOOL_BATCH_BYTES) this.flush();
  }

  private readonly onError = (err: Error): void => this.fail(new CmpError(`error receiving tgz file: stream Recv error: ${messageOf(err)}`), true);

  private readonly onEnd = (): void => {
    if (this.failure) return this.finish(this.failure);
    if (!this.metadata) return this.finish(new CmpError('error receiving stream header: EOF'));
    const checksum = this.hash.digest('hex');
    const { spool } = this;
    if (spool) {
      this.flush();
      spool.end(() => void this.verified(checksum));
    } else {
      // Within the buffer: the tarball stays in memory (nothing when a shared copy is held).
      const bytes = this.lease ? undefined : this.takeBatch();
      void this.verified(checksum, bytes);
    }
  };

  /** Everything is received (and spooled): check the digest, find the index, share the copy. */
  private async verified(checksum: string, bytes?: Buffer): Promise<void> {
    if (this.settled) return;
    const metadata = this.metadata!;
    if (checksum !== metadata.checksum) {
      return this.finish(new CmpError('error receiving tgz file: file checksum validation error'));
    }
    const { known, opts } = this;
    const index = known ?? (await this.builtIndex());
    if (this.settled) return;
    metrics.indexMemo.inc({ result: known ? 'hit' : 'miss' });
    if (index) opts.memo.remember(checksum, index);
    if (bytes) return this.finish(undefined, inMemory(opts, metadata, checksum, bytes, index));
    return this.shareSpooled(checksum, index);
  }

  /** The index built while receiving; undefined when the tarball could not be indexed. */
  private async builtIndex(): Promise<TreeIndex | undefined> {
    try {
      return await this.indexer!.end();
    } catch (err) {
      // Limits are known from the index already: answer now instead of shipping the
      // tarball to a worker. Other tar errors get their exact text from extraction.
      if (err instanceof CmpError && err.code === Status.RESOURCE_EXHAUSTED) {
        this.finish(wrap('error decompressing tgz file', err));
      }
      return undefined;
    }
  }

  /** A spooled tarball (or one the spool store holds already): answered with the shared copy. */
  private async shareSpooled(checksum: string, index: TreeIndex | undefined): Promise<void> {
    let copy: SpoolLease;
    try {
      copy = this.lease ?? (await this.opts.spools.adopt(checksum, this.opts.tgzPath, this.received));
    } catch {
      // No shared copy (link refused): this request keeps its own, removed by the caller.
      copy = { path: this.opts.tgzPath, release: () => Promise.resolve() };
    }
    this.lease = copy;
    if (this.settled) return void copy.release();
    const file = Promise.resolve(copy.path);
    this.finish(undefined, { metadata: this.metadata!, checksum, size: this.received, index, file: () => file, release: () => copy.release() });
  }
}


/** A tarball received into memory: a file (a shared copy in the spool store) only when asked for. */
function inMemory(opts: IngestOptions, metadata: ManifestRequestMetadata, checksum: string, bytes: Buffer, index: TreeIndex | undefined): IngestedRepo {
  const copy = copyOnDemand(opts.spools, checksum, bytes, err => {
    const text = `error receiving tgz file: error writing tgz file: ${messageOf(err)}`;
    return new CmpError(opts.receiveText ? `${opts.receiveText}: ${text}` : text);
  });
  return { metadata, checksum, size: bytes.length, bytes, index, ...copy };
}
