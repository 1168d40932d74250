import http2 from 'node:http2';
import path from 'node:path';
import { credentials } from '@grpc/grpc-js';
import { ConfigManagementPluginServiceClient } from '../proto/generated/cmpserver/plugin/plugin.js';

const MiB = 1024 * 1024;
const INT32_MAX = 2 ** 31 - 1;

/**
 * ARGOCD_GRPC_MAX_SIZE_MB as Argo's env.ParseNumFromEnv reads it (default 100, range 0..MaxInt32,
 * anything unparsable or out of range ⇒ the default), in bytes. grpc-js takes a signed 32-bit
 * length, so larger values are clamped (docs/argo-contract.md#message-size: the client applies the same limit).
 */
export function grpcMaxMessageBytes(env: Record<string, string | undefined>): number {
  const raw = env.ARGOCD_GRPC_MAX_SIZE_MB;
  const n = raw !== undefined && /^[+-]?\d+$/.test(raw) ? Number(raw) : NaN;
  const mb = Number.isSafeInteger(n) && n >= 0 && n <= INT32_MAX ? n : 100;
  return Math.min(mb * MiB, INT32_MAX);
}

export interface ConnectOptions {
  /** Max size of one message, both directions (default: 100 MiB). */
  maxMessageBytes?: number;
  /**
   * A connection of this client's own, as the repo-server dials one per call (grpc-js otherwise
   * shares one connection among the clients of a target): what spreads calls over proxy processes.
   */
  ownConnection?: boolean;
}

/**
 * A plugin-service client on a unix socket, configured like the repo-server's: plain text,
 * per-message size limits, keepalive pings every 20 s only while a call is active (docs/argo-contract.md#keepalive).
 */
export function connectPlugin(socketPath: string, options: ConnectOptions = {}): ConfigManagementPluginServiceClient {
  const max = options.maxMessageBytes ?? 100 * MiB;
  return new ConfigManagementPluginServiceClient(`unix:${path.resolve(socketPath)}`, credentials.createInsecure(), {
    'grpc.max_receive_message_length': max,
    'grpc.max_send_message_length': max,
    'grpc.keepalive_time_ms': 20_000,
    'grpc.keepalive_permit_without_calls': 0,
    ...(options.ownConnection ? { 'grpc.use_local_subchannel_pool': 1 } : {}),
  });
}

/**
 * The header list this process's HTTP/2 clients can receive: Node's nghttp2 cannot decode a
 * header field whose encoded form passes 64 KiB, and when a status message does (a plugin's long
 * stderr), it drops the connection without telling grpc-js, whose call then hangs until its
 * keepalive gives up (~40 s, `Connection dropped`).
 */
export const RECEIVABLE_HEADER_LIST_BYTES = 65535;
let announced = false;

/**
 * Make every HTTP/2 client session of this process announce RECEIVABLE_HEADER_LIST_BYTES as its
 * SETTINGS_MAX_HEADER_LIST_SIZE (grpc-js has no option for it; Node announces no limit by
 * default). A server that honours the setting, as grpc-go's and ours do, then resets a call whose
 * status would not fit (INTERNAL) at once. For the client command only: it changes the process.
 */
export function announceReceivableHeaders(): void {
  if (announced) return;
  announced = true;
  const connect = http2.connect;
  http2.connect = ((authority: string | URL, options?: http2.ClientSessionOptions | ((...a: unknown[]) => void), listener?: (...a: unknown[]) => void) => {
    if (typeof options === 'function') return connect(authority, { settings: { maxHeaderListSize: RECEIVABLE_HEADER_LIST_BYTES } }, options);
    return connect(authority, { ...options, settings: { maxHeaderListSize: RECEIVABLE_HEADER_LIST_BYTES, ...options?.settings } }, listener);
  }) as typeof http2.connect;
}
