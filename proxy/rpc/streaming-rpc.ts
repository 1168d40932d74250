import { randomInt, randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { sendUnaryData, ServerReadableStream } from '@grpc/grpc-js';
import { contextWithDeadline } from '../../cmp/context.js';
import { wrap } from '../../cmp/errors.js';
import { RPC_TEXT, type PluginResult, type RpcKind } from '../../cmp/plugin/request.js';
import type { AppStreamRequest } from '../../proto/generated/cmpserver/plugin/plugin.js';
import { receiveRepoStream } from '../ingest/receive-repo-stream.js';
import { answerRequest, type AnswerDeps } from './answer-request.js';
import { toStatus } from './status.js';

export interface StreamingRpcDeps extends AnswerDeps {
  /** Tracks in-flight requests so shutdown can wait for them. */
  inflight: Set<Promise<unknown>>;
}

/**
 * One client-streaming RPC, in Argo's order (cmp-contract §10, §12, §13): request work dir,
 * receive + verify, then answer; the work dir is removed whatever happens.
 */
export function streamingRpc<Res>(deps: StreamingRpcDeps, kind: RpcKind, toResponse: (r: PluginResult) => Res) {
  return (call: ServerReadableStream<AppStreamRequest, Res>, callback: sendUnaryData<Res>): void => {
    const done = handle(deps, kind, call).then(
      result => callback(null, toResponse(result)),
      (err: unknown) => callback(toStatus(err)),
    );
    deps.inflight.add(done);
    void done.finally(() => deps.inflight.delete(done));
  };
}

async function handle(deps: StreamingRpcDeps, kind: RpcKind, call: ServerReadableStream<AppStreamRequest, unknown>) {
  const deadline = call.getDeadline();
  const ctx = contextWithDeadline(deadline instanceof Date ? deadline.getTime() : Number.isFinite(deadline) ? deadline : undefined);
  call.once('cancelled', () => ctx.cancel());
  const text = RPC_TEXT[kind];
  const { options } = deps.engine;
  const dir = path.join(options.workRoot, randomUUID());
  try {
    try {
      await fs.mkdir(dir, { recursive: true, mode: 0o755 });
    } catch (err) {
      throw wrap(`${text.workdir}: error creating temp dir`, err);
    }
    let repo;
    try {
      repo = await receiveRepoStream(call, {
        ctx,
        tgzPath: path.join(dir, String(randomInt(1, 2 ** 31))),
        maxTarballBytes: options.limits.tarballBytes,
        maxExtractedBytes: options.limits.extractedBytes,
        maxEntries: options.limits.entries,
      });
    } catch (err) {
      throw wrap(text.receive, err);
    }
    return await answerRequest(deps, kind, repo, dir, ctx);
  } finally {
    ctx.dispose();
    await fs.rm(dir, { recursive: true, force: true, maxRetries: 3 });
  }
}
