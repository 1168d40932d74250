import type { RedisOptions } from '../../cmp/config/options.js';
import type { Ctx } from '../../cmp/context.js';
import { CmpError, wrap } from '../../cmp/errors.js';
import { RPC_TEXT, type RpcKind } from '../../cmp/plugin/request.js';
import { redisUnavailable } from '../../cmp/queue/redis-connection.js';

/**
 * Run a Redis step for a caller: abandoned when the caller's context ends (with the text Go
 * gives a command that never started), and any Redis error (a command not answered within
 * CMP_OFFLOAD_REDIS_TIMEOUT, connected or not) becomes UNAVAILABLE naming Redis.
 */
export async function guard<T>(ro: RedisOptions, kind: RpcKind, ctx: Ctx, step: Promise<T>): Promise<T> {
  step.catch(() => {}); // Its error is taken below, or it outlives an aborted caller: then nobody wants it.
  const outcome = await raceAbort(
    step.then(
      value => ({ value }),
      (error: unknown) => ({ error }),
    ),
    ctx.signal,
  );
  if (outcome === 'aborted') throw wrap(RPC_TEXT[kind].command, ctx.signal.reason);
  if ('error' in outcome) {
    if (outcome.error instanceof CmpError) throw outcome.error;
    throw redisUnavailable(ro, outcome.error);
  }
  return outcome.value;
}

/** Settle with the promise's value, or 'aborted' as soon as the signal aborts. */
export function raceAbort<T>(p: Promise<T>, signal: AbortSignal): Promise<T | 'aborted'> {
  if (signal.aborted) return Promise.resolve('aborted');
  return new Promise((resolve, reject) => {
    const onAbort = () => resolve('aborted');
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      v => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}
