import { status as Status, Metadata, type ClientWritableStream, type ServiceError } from '@grpc/grpc-js';
import type {
  AppStreamRequest,
  ConfigManagementPluginServiceClient,
  ManifestResponse,
  ParametersAnnouncementResponse,
  RepositoryResponse,
} from '../proto/generated/cmpserver/plugin/plugin.js';
import type { RpcOutcome } from '../cmp/rpc-status.js';

/** The three client-streaming RPCs of the plugin service, by their grpc-js method names. */
export interface StreamingRpcs {
  generateManifest: ManifestResponse;
  matchRepository: RepositoryResponse;
  getParametersAnnouncement: ParametersAnnouncementResponse;
}
export type StreamingRpc = keyof StreamingRpcs;

export interface ClientStreamOptions {
  /** Absolute deadline (ms since epoch); sent to the server as `grpc-timeout`. */
  deadline?: number;
  /** Half-close after the last message (default true). False leaves the stream open until the deadline. */
  halfClose?: boolean;
  /** Extra request headers. */
  headers?: Record<string, string>;
}

/** What grpc-js says when its own deadline timer fires, versus what grpc-go says. */
const GRPC_JS_DEADLINE_TEXT = /^Deadline exceeded/;
const GO_DEADLINE_TEXT = 'context deadline exceeded';

/**
 * Open a client-streaming call, send `messages` in order honouring write backpressure, half-close,
 * and resolve with the response or the final status. Stops sending as soon as the call has ended
 * (the server may answer before reading everything). Never rejects for a status; rejects only when
 * `messages` itself throws (the call is then cancelled).
 */
export async function callClientStream<R extends StreamingRpc>(
  client: ConfigManagementPluginServiceClient,
  rpc: R,
  messages: Iterable<AppStreamRequest> | AsyncIterable<AppStreamRequest>,
  options: ClientStreamOptions = {},
): Promise<RpcOutcome<StreamingRpcs[R]>> {
  const headers = new Metadata();
  for (const [k, v] of Object.entries(options.headers ?? {})) headers.set(k, v);

  let ended = false;
  let settle!: (o: RpcOutcome<StreamingRpcs[R]>) => void;
  const outcome = new Promise<RpcOutcome<StreamingRpcs[R]>>((resolve) => (settle = resolve));
  const callback = (err: ServiceError | null, value?: StreamingRpcs[R]) => {
    ended = true;
    settle(err ? statusOutcome(err, options.deadline) : { value: value as StreamingRpcs[R] });
  };
  // The generated overloads cannot be indexed generically; all three share this shape.
  const open = client[rpc] as unknown as (
    m: Metadata,
    o: { deadline?: number },
    cb: typeof callback,
  ) => ClientWritableStream<AppStreamRequest>;
  const call = open.call(client, headers, options.deadline === undefined ? {} : { deadline: options.deadline }, callback);
  // grpc-js reports failures through the callback; a stray stream 'error' must not crash the process.
  call.on('error', () => {});

  try {
    for await (const message of messages) {
      if (ended) break;
      if (!call.write(message)) await drainOrEnd(call, outcome);
    }
  } catch (err) {
    call.cancel();
    throw err;
  }
  if (!ended && options.halfClose !== false) call.end();
  return outcome;
}

function drainOrEnd(call: ClientWritableStream<AppStreamRequest>, outcome: Promise<unknown>): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      call.off('drain', done);
      resolve();
    };
    call.on('drain', done);
    void outcome.then(done);
  });
}

/** The status, with grpc-js's local deadline text replaced by grpc-go's (what the repo-server would print). */
function statusOutcome(err: ServiceError, deadline: number | undefined): { code: Status; details: string } {
  const localDeadline =
    err.code === Status.DEADLINE_EXCEEDED &&
    deadline !== undefined &&
    Date.now() >= deadline &&
    GRPC_JS_DEADLINE_TEXT.test(err.details);
  return { code: err.code, details: localDeadline ? GO_DEADLINE_TEXT : err.details };
}
