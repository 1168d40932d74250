import { canceled, deadlineExceeded, type CmpError } from './errors.js';
import type { RequestTrace } from './observe/request-trace.js';

/**
 * A request context in the sense of Go's context.Context: an AbortSignal whose reason is the
 * CmpError Go would return from ctx.Err() (`context deadline exceeded` or `context canceled`).
 */
export interface Ctx {
  readonly signal: AbortSignal;
  /** Absolute deadline in ms since epoch, or undefined when the caller set none. */
  readonly deadline: number | undefined;
  /**
   * The request's trace, carried by the proxy's contexts (see `currentTrace`). The worker and the
   * runner set none: their trace travels in AsyncLocalStorage.
   */
  readonly trace?: RequestTrace;
  /** Told of the plugin process trees the request starts (standalone's tamper rule, run-watch.ts). */
  readonly trees?: TreeWatch;
}

/** Told when a plugin command's process tree starts, and when it is gone. */
export interface TreeWatch {
  started(): void;
  /**
   * Once per started tree. `clean`: its cmp-reap exited by itself, so every process of the tree
   * has exited; false: a process may have escaped (its cmp-reap was killed, or there is none).
   */
  ended(clean: boolean): void;
}

/** Argo's cmpTimeoutBuffer: the server gives up 100 ms before the caller's deadline. */
export const CMP_TIMEOUT_BUFFER_MS = 100;

export interface CtxHandle extends Ctx {
  /** Cancel with `context canceled` (the caller went away). */
  cancel(): void;
  /** Release the timer; call when the request is over. */
  dispose(): void;
}

/**
 * Derive a context from an optional caller deadline, moved `bufferMs` earlier (Argo's
 * buffered_context.WithEarlierDeadline). Without a deadline there is no timeout at all.
 */
export function contextWithDeadline(deadline: number | undefined, bufferMs = CMP_TIMEOUT_BUFFER_MS): CtxHandle {
  const ac = new AbortController();
  const effective = deadline === undefined ? undefined : deadline - bufferMs;
  let timer: NodeJS.Timeout | undefined;
  if (effective !== undefined) {
    const delay = effective - Date.now();
    if (delay <= 0) ac.abort(deadlineExceeded());
    else {
      timer = setTimeout(() => ac.abort(deadlineExceeded()), Math.min(delay, 2 ** 31 - 1));
      timer.unref();
    }
  }
  return {
    signal: ac.signal,
    deadline: effective,
    cancel: () => ac.abort(canceled()),
    dispose: () => clearTimeout(timer),
  };
}

/** ctx.Err(): the context's error once it is done, else undefined. */
export function ctxErr(ctx: Ctx): CmpError | undefined {
  return ctx.signal.aborted ? (ctx.signal.reason as CmpError) : undefined;
}
