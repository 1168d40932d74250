import type { AppPathsStore } from '../../cmp/cache/app-paths.js';
import type { TracedRequest } from '../../cmp/cache/traced-key.js';
import { CmpError, codeOf, messageOf } from '../../cmp/errors.js';
import type { Status } from '../../cmp/grpc-status.js';
import type { TracePart } from '../../cmp/observe/request-trace.js';
import type { SpanContext } from '../../cmp/observe/tracing.js';
import type { PluginRequest, PluginResult } from '../../cmp/plugin/request.js';
import type { TreeEntry } from '../../cmp/tar/tree-index.js';
import type { RepoRef } from '../dispatch/dispatcher.js';
import type { Prepared } from '../../cmp/split/prepared.js';

/**
 * The messages between the coordinator and its ingest processes (CMP_OFFLOAD_PROXY_PROCESSES > 1),
 * over the cluster IPC channel with Node's structured-clone serialization. An ingest process
 * hands over only what the dispatcher needs after ingest: the request, the path of its verified
 * tarball copy (the ingest process holds it until the answer), its cache key, deadline and span;
 * a traced request's tree index crosses once per tarball (the coordinator remembers it).
 */

/** A verified tarball as it crosses: in memory (small), or the ingest process's shared copy. */
export type WireRepo = Pick<RepoRef, 'checksum' | 'size'> & ({ bytes: Uint8Array } | { tgzPath: string });

/** A traced request without its index, which the coordinator keeps by the tarball's sha256. */
export type TracedRef = Omit<TracedRequest, 'index'> & {
  checksum: string;
  /** The index's entries, parents first: sent when the coordinator may not hold them. */
  entries?: TreeEntry[];
};

export type PathsOp = keyof AppPathsStore;

/** Ingest process → coordinator. */
export type ToCoordinator =
  | { t: 'listening' }
  /** The socket could not be served (the bind error's text): the proxy does not start. */
  | { t: 'listen-failed'; message: string }
  | {
      t: 'dispatch';
      id: number;
      req: PluginRequest;
      repo: WireRepo;
      key: string | undefined;
      /** Absolute, already moved earlier by Argo's buffer (the ingest process's ctx.deadline). */
      deadline: number | undefined;
      span: SpanContext | undefined;
      traced: TracedRef | undefined;
    }
  /** The caller went away: cancel (a deadline needs no message, both sides hold it). */
  | { t: 'cancel'; id: number }
  | { t: 'paths'; id: number; op: PathsOp; args: unknown[] }
  | { t: 'metrics'; id: number; metrics: unknown[] }
  /** A request dir or spool file this process made (`held`) or removed: removed for it if it dies. */
  | { t: 'work-path'; path: string; held: boolean };

/** Coordinator → ingest process. */
export type ToIngest =
  /**
   * `prepared`: a generate result made off the coordinator's loop (prepared.ts) crosses as its
   * encoding alone, without `result`: the ingest process's loop never decodes its manifests.
   */
  | { t: 'answer'; id: number; result?: PluginResult; prepared?: Prepared; error?: WireError; trace: TracePart }
  /** The coordinator does not hold the traced request's index: send the dispatch again with it. */
  | { t: 'need-index'; id: number }
  | { t: 'paths'; id: number; value?: unknown; error?: WireError }
  | { t: 'metrics'; id: number }
  /** Shut down: stop accepting, drain within the grace period, exit. */
  | { t: 'stop' };

/** A CmpError as data: its full text and its gRPC code survive the crossing. */
export interface WireError {
  message: string;
  code: Status;
}

export function toWire(err: unknown): WireError {
  return { message: messageOf(err), code: codeOf(err) };
}

export function fromWire(e: WireError): CmpError {
  return new CmpError(e.message, e.code);
}
