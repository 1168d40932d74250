import { status as Status } from '@grpc/grpc-js';
import { formatGoTime, RFC3339 } from '../logrus-text.js';

/**
 * The fields argocd-cmp-server's gRPC logging interceptor puts on its per-call lines, so that the
 * queries operators run on Argo's logs match ours. Argo CD (cmpserver/server.go, v3) installs
 * go-grpc-middleware v2's `logging.StreamServerInterceptor(grpc_util.InterceptorLogger(serverLog))`
 * with no options; the field names and value formats are that package's
 * (interceptors/logging/interceptors.go, options.go, logging.go) and interceptors/callmeta.go's.
 * `grpc.error` (the error text) is left out on purpose: it may hold secrets. See
 * docs/operations.md#request-log-line.
 */
export type GrpcLogFields = Record<string, string>;

/** What one call's Argo fields are made from. */
export interface GrpcCall {
  service: string;
  method: string;
  /** interceptors.GRPCType: `unary`, `client_stream`, `server_stream`, `bidi_stream`. */
  methodType: 'unary' | 'client_stream' | 'server_stream' | 'bidi_stream';
  /** grpc-js's `call.getPeer()`. */
  peer: string;
  start: Date;
  /** grpc-js's `call.getDeadline()`: epoch ms (a Date on some paths), Infinity without one. */
  deadline: Date | number;
}

/** codes.Code.String() of grpc-go: the Go constant names. */
const GO_CODE_NAMES = [
  'OK', 'Canceled', 'Unknown', 'InvalidArgument', 'DeadlineExceeded', 'NotFound', 'AlreadyExists', 'PermissionDenied',
  'ResourceExhausted', 'FailedPrecondition', 'Aborted', 'OutOfRange', 'Unimplemented', 'Internal', 'Unavailable',
  'DataLoss', 'Unauthenticated',
];

export function goCodeName(code: Status): string {
  return GO_CODE_NAMES[code] ?? `Code(${code})`;
}

/** logging.DefaultServerCodeToLevel, as pino level names. */
export function serverCodeLevel(code: Status): 'info' | 'warn' | 'error' {
  switch (code) {
    case Status.OK: case Status.NOT_FOUND: case Status.CANCELLED: case Status.ALREADY_EXISTS: case Status.INVALID_ARGUMENT: case Status.UNAUTHENTICATED:
      return 'info';
    case Status.DEADLINE_EXCEEDED: case Status.PERMISSION_DENIED: case Status.RESOURCE_EXHAUSTED: case Status.FAILED_PRECONDITION:
    case Status.ABORTED: case Status.OUT_OF_RANGE: case Status.UNAVAILABLE:
      return 'warn';
    default:
      return 'error';
  }
}

/**
 * logging.DurationToTimeMillisFields: `fmt.Sprintf("%v", float32(d.Nanoseconds()/1000) / 1000)`,
 * i.e. whole microseconds as a float32 count of milliseconds, printed as Go's %v of a float32
 * (the shortest digits that read back as the same float32; %e form from 1e6 on).
 */
export function goTimeMs(ms: number): string {
  const micros = Math.trunc(Math.max(0, ms) * 1000);
  const f = Math.fround(Math.fround(micros) / 1000);
  if (f === 0) return '0';
  let digits = '';
  for (let p = 1; p <= 9; p++) {
    digits = f.toPrecision(p);
    if (Math.fround(Number(digits)) === f) break;
  }
  const [mant, exp] = Number(digits).toExponential().split('e') as [string, string];
  const e = Number(exp);
  if (e < -4 || e >= 6) return `${mant}e${e < 0 ? '-' : '+'}${String(Math.abs(e)).padStart(2, '0')}`;
  return String(Number(digits));
}

/**
 * `peer.address` as grpc-go has it: a unix-socket client (unbound) is `@`, which grpc-js reports
 * as `unknown`; a TCP peer is host:port with IPv6 hosts in brackets.
 */
export function goPeerAddress(peer: string): string {
  if (peer === 'unknown') return '@';
  const m = /^(.*:.*):(\d+)$/.exec(peer);
  return m && !peer.startsWith('[') ? `[${m[1]}]:${m[2]}` : peer;
}

/** The fields every line of the call carries (Argo's "started call" line has these). */
export function grpcCallFields(call: GrpcCall): GrpcLogFields {
  const fields: GrpcLogFields = {
    protocol: 'grpc',
    'grpc.component': 'server',
    'grpc.service': call.service,
    'grpc.method': call.method,
    'grpc.method_type': call.methodType,
    'peer.address': goPeerAddress(call.peer),
    'grpc.start_time': formatGoTime(call.start, RFC3339),
  };
  const deadline = call.deadline instanceof Date ? call.deadline.getTime() : call.deadline;
  if (Number.isFinite(deadline)) fields['grpc.request.deadline'] = formatGoTime(new Date(deadline), RFC3339);
  return fields;
}

/** The fields of Argo's "finished call" line: the call's, its code and its duration. */
export function grpcFinishFields(call: GrpcCall, code: Status, elapsedMs: number): GrpcLogFields {
  return { ...grpcCallFields(call), 'grpc.code': goCodeName(code), 'grpc.time_ms': goTimeMs(elapsedMs) };
}
