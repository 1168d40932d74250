import type { Ctx } from '../../cmp/context.js';

interface Shared<T> {
  waiters: number;
  controller: AbortController;
  promise: Promise<T>;
}

/**
 * Identical requests in flight run once. Each caller waits with its own context; the shared run
 * is cancelled only when the last caller gives up, and that last caller still receives the run's
 * own error (e.g. the command's `signal: killed`), exactly as a lone request would.
 */
export class Coalescer<T> {
  private readonly inflight = new Map<string, Shared<T>>();
  coalesced = 0;

  run(key: string, ctx: Ctx, start: (ctx: Ctx) => Promise<T>): Promise<T> {
    let shared = this.inflight.get(key);
    if (shared) this.coalesced++;
    else {
      const controller = new AbortController();
      // The run's stages belong to the request that started it.
      const promise = start({ signal: controller.signal, deadline: undefined, trace: ctx.trace });
      shared = { waiters: 0, controller, promise };
      this.inflight.set(key, shared);
      const created = shared;
      const forget = () => {
        if (this.inflight.get(key) === created) this.inflight.delete(key);
      };
      promise.then(forget, forget);
    }
    return this.join(shared, ctx);
  }

  private join(shared: Shared<T>, ctx: Ctx): Promise<T> {
    shared.waiters++;
    return new Promise<T>((resolve, reject) => {
      const onAbort = () => {
        shared.waiters--;
        if (shared.waiters === 0) shared.controller.abort(ctx.signal.reason);
        else reject(ctx.signal.reason);
      };
      if (ctx.signal.aborted) onAbort();
      else ctx.signal.addEventListener('abort', onAbort, { once: true });
      shared.promise.then(
        v => {
          ctx.signal.removeEventListener('abort', onAbort);
          resolve(v);
        },
        (e: unknown) => {
          ctx.signal.removeEventListener('abort', onAbort);
          reject(e);
        },
      );
    });
  }
}
