import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { status as Status, type sendUnaryData, type ServerReadableStream } from '@grpc/grpc-js';
import { contextWithDeadline } from '../../cmp/context.js';
import { codeOf, wrap } from '../../cmp/errors.js';
import { metrics } from '../../cmp/observe/metrics.js';
import { RequestTrace, timeStage } from '../../cmp/observe/request-trace.js';
import { endRequestSpan, traceRequest } from '../../cmp/observe/request-spans.js';
import { grpcCallFields, grpcFinishFields, serverCodeLevel, type GrpcCall } from '../../cmp/observe/grpc-log-fields.js';
import { nowMs, parseTraceContext, tracingEnabled } from '../../cmp/observe/tracing.js';
import { appNameOf } from '../../cmp/queue/keys.js';
import { RPC_TEXT, type PluginResult, type RpcKind } from '../../cmp/plugin/request.js';
import type { AppStreamRequest } from '../../proto/generated/cmpserver/plugin/plugin.js';
import type { IndexMemo } from '../ingest/index-memo.js';
import { receiveRepoStream, type IngestedRepo } from '../ingest/receive-repo-stream.js';
import type { SpoolStore, WorkPaths } from '../ingest/spool-store.js';
import { answerRequest, type AnswerDeps } from './answer-request.js';
import { toStatus } from './status.js';

export interface StreamingRpcDeps extends AnswerDeps {
  /** Tracks in-flight requests so shutdown can wait for them. */
  inflight: Set<Promise<unknown>>;
  /** Tree indexes of the tarballs ingested lately. */
  memo: IndexMemo;
  /** The shared copies of the tarballs in use. */
  spools: SpoolStore;
  /** Told of each request dir made and removed (an ingest process's coordinator cleans up after it). */
  workPaths?: WorkPaths;
}

/**
 * One client-streaming RPC, in Argo's order (docs/argo-contract.md#generatemanifest, #matchrepository, #getparametersannouncement):
 * receive + verify, then answer; a spooled tarball is removed whatever happens.
 */
export function streamingRpc<Res>(deps: StreamingRpcDeps, kind: RpcKind, toResponse: (r: PluginResult) => Res) {
  return (call: ServerReadableStream<AppStreamRequest, Res>, callback: sendUnaryData<Res>): void => {
    const trace = new RequestTrace();
    const startMs = nowMs();
    const grpc: GrpcCall = {
      service: SERVICE,
      method: RPC_METHOD[kind],
      methodType: 'client_stream',
      peer: call.getPeer(),
      start: new Date(startMs),
      deadline: call.getDeadline(),
    };
    // Argo's interceptor also logs "started call" (at info); ours is at debug, see docs/operations.md#request-log-line.
    if (deps.log?.isLevelEnabled('debug')) deps.log.debug({ plugin: deps.pluginName, rpc: kind, ...grpcCallFields(grpc) }, 'started call');
    // Tracing: continue the repo-server's W3C trace context (gRPC metadata `traceparent`, `tracestate`).
    if (tracingEnabled()) {
      const parent = parseTraceContext(call.metadata.get('traceparent')[0], call.metadata.get('tracestate'));
      traceRequest(trace, `${SERVICE}/${RPC_METHOD[kind]}`, 'server', startMs, parent);
    }
    metrics.inflightRequests.inc();
    // The trace travels in the request's context, not in AsyncLocalStorage (see RequestTrace).
    const done = handle(deps, kind, call, trace)
      .then(
        result => timeStage('respond', () => callback(null, toResponse(result)), undefined, { trace }).then(() => Status.OK),
        (err: unknown) => {
          callback(toStatus(err));
          return codeOf(err);
        },
      )
      .then(code => {
        finish(deps, kind, trace, code, grpc, nowMs() - startMs);
        if (trace.stageSpans) endRequestSpan(trace, spanAttributes(deps, kind, trace, code), code !== Status.OK);
      });
    deps.inflight.add(done);
    void done.finally(() => {
      metrics.inflightRequests.dec();
      deps.inflight.delete(done);
    });
  };
}

const SERVICE = 'plugin.ConfigManagementPluginService';
const RPC_METHOD: Record<RpcKind, string> = { generate: 'GenerateManifest', match: 'MatchRepository', parameters: 'GetParametersAnnouncement' };

/** The request span's attributes: what the log line says, nothing from env values. */
function spanAttributes(deps: StreamingRpcDeps, kind: RpcKind, trace: RequestTrace, code: Status): Record<string, string | number> {
  return {
    'rpc.system': 'grpc',
    'rpc.service': SERVICE,
    'rpc.method': RPC_METHOD[kind],
    'rpc.grpc.status_code': code,
    'cmp.plugin': deps.pluginName,
    'cmp.app': trace.app,
    'cmp.cache': trace.cache ?? 'none',
    'cmp.bytes': trace.bytes,
  };
}

/**
 * Count the request and write its one log line (no env values, no error texts: they may hold
 * secrets): our fields, then the ones Argo's gRPC logging interceptor writes, at its level for the code.
 */
function finish(deps: StreamingRpcDeps, kind: RpcKind, trace: RequestTrace, code: Status, grpc: GrpcCall, elapsedMs: number): void {
  const outcome = Status[code] ?? String(code);
  const durations = trace.durations();
  metrics.requests.inc({ rpc: kind, outcome });
  metrics.requestSeconds.observe({ rpc: kind }, durations.total! / 1000);
  const level = serverCodeLevel(code);
  if (!deps.log?.isLevelEnabled(level)) return;
  deps.log[level](
    {
      plugin: deps.pluginName,
      app: trace.app,
      rpc: kind,
      cache: trace.cache ?? 'none',
      outcome,
      bytes: trace.bytes,
      ms: durations,
      ...grpcFinishFields(grpc, code, elapsedMs),
    },
    'request',
  );
}

async function handle(deps: StreamingRpcDeps, kind: RpcKind, call: ServerReadableStream<AppStreamRequest, unknown>, trace: RequestTrace) {
  const deadline = call.getDeadline();
  const ctx = { ...contextWithDeadline(deadline instanceof Date ? deadline.getTime() : Number.isFinite(deadline) ? deadline : undefined), trace };
  // Only while the request is handled: a caller gone after the answer cancels nothing.
  const onCancelled = () => ctx.cancel();
  call.once('cancelled', onCancelled);
  const text = RPC_TEXT[kind];
  const { options } = deps.engine;
  // The request's work dir, as Argo names one: nothing is made there (index-answered patterns
  // and error texts are rooted at it); a tarball larger than the receive buffer is spooled
  // beside it, and a run extracts into a dir of its own.
  const dir = path.join(options.workRoot, randomUUID());
  const tgzPath = `${dir}.tgz`;
  let spooled = false;
  let repo: IngestedRepo | undefined;
  try {
    try {
      repo = await timeStage(
        'ingest',
        () =>
          receiveRepoStream(call, {
            ctx,
            tgzPath,
            receiveText: text.receive,
            spooled: () => {
              spooled = true;
              deps.workPaths?.held(tgzPath);
            },
            memo: deps.memo,
            spools: deps.spools,
            maxTarballBytes: options.limits.tarballBytes,
            maxExtractedBytes: options.limits.extractedBytes,
            maxEntries: options.limits.entries,
          }),
        undefined,
        ctx,
      );
    } catch (err) {
      throw wrap(text.receive, err);
    }
    trace.app = appNameOf(repo.metadata.env);
    trace.bytes = repo.size;
    metrics.ingestedBytes.inc(repo.size);
    return await answerRequest(deps, kind, repo, dir, ctx);
  } finally {
    call.off('cancelled', onCancelled);
    ctx.dispose();
    await repo?.release();
    if (spooled) {
      await fs.rm(tgzPath, { force: true, maxRetries: 3 });
      deps.workPaths?.released(tgzPath);
    }
  }
}
