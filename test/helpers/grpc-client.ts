import { createHash } from 'node:crypto';
import { Metadata, status as Status, type ServiceError } from '@grpc/grpc-js';
import type {
  AppStreamRequest,
  CheckPluginConfigurationResponse,
  ConfigManagementPluginServiceClient,
  EnvEntry,
  ManifestRequestMetadata,
  ManifestResponse,
  ParametersAnnouncementResponse,
  RepositoryResponse,
} from '../../proto/generated/cmpserver/plugin/plugin.js';
import { callClientStream, type StreamingRpc } from '../../cli/client-stream.js';
import { connectPlugin, type ConnectOptions } from '../../cli/connect.js';
import type { RpcOutcome } from '../../cmp/rpc-status.js';

export type { RpcOutcome };

/** One client-streaming call, normal or hostile. */
export interface StreamCall {
  /** The first message. `null` sends no metadata message at all. */
  metadata?: ManifestRequestMetadata | null;
  /** File chunks sent after the metadata, each as one message (any sizes, empty ones included). */
  chunks?: Uint8Array[];
  /**
   * The exact message sequence; replaces `metadata` + `chunks`. `[]` half-closes at once;
   * `[meta, meta]` sends two metadata messages; `[{}]` a message with no oneof set.
   */
  messages?: AppStreamRequest[];
  /** Deadline relative to the start of the call (sent as grpc-timeout). */
  timeoutMs?: number;
  /** `false` never half-closes (the call then ends by deadline or by the server). Default true. */
  halfClose?: boolean;
  /** Extra request headers. */
  headers?: Record<string, string>;
}

export interface CmpTestClient {
  generate(call: StreamCall): Promise<RpcOutcome<ManifestResponse>>;
  match(call: StreamCall): Promise<RpcOutcome<RepositoryResponse>>;
  params(call: StreamCall): Promise<RpcOutcome<ParametersAnnouncementResponse>>;
  check(timeoutMs?: number): Promise<RpcOutcome<CheckPluginConfigurationResponse>>;
  /** The underlying grpc-js client, for anything not covered here. */
  raw: ConfigManagementPluginServiceClient;
  close(): void;
}

/** A plugin-service client on a unix socket path. Results are `{value}` or `{code, details}`, never thrown. */
export function openCmpClient(socketPath: string, options: ConnectOptions = {}): CmpTestClient {
  const raw = connectPlugin(socketPath, options);
  const stream = <R extends StreamingRpc>(rpc: R, call: StreamCall) =>
    callClientStream(raw, rpc, messagesOf(call), {
      deadline: call.timeoutMs === undefined ? undefined : Date.now() + call.timeoutMs,
      halfClose: call.halfClose,
      headers: call.headers,
    });
  return {
    generate: (call) => stream('generateManifest', call),
    match: (call) => stream('matchRepository', call),
    params: (call) => stream('getParametersAnnouncement', call),
    check: (timeoutMs) =>
      new Promise((resolve) => {
        const options = timeoutMs === undefined ? {} : { deadline: Date.now() + timeoutMs };
        raw.checkPluginConfiguration({}, new Metadata(), options, (err, value) => resolve(err ? statusOf(err) : { value }));
      }),
    raw,
    close: () => raw.close(),
  };
}

function statusOf(err: ServiceError): { code: Status; details: string } {
  return { code: err.code, details: err.details };
}

function messagesOf(call: StreamCall): AppStreamRequest[] {
  if (call.messages) return call.messages;
  const out: AppStreamRequest[] = call.metadata ? [{ metadata: call.metadata }] : [];
  for (const chunk of call.chunks ?? []) out.push(fileMessage(chunk));
  return out;
}

/** Stream metadata for `tgz` as the repo-server fills it: lower-case hex sha256 and byte size. */
export function repoMetadata(
  tgz: Uint8Array,
  opts: { appRelPath?: string; appName?: string; env?: EnvEntry[]; checksum?: string } = {},
): ManifestRequestMetadata {
  return {
    appName: opts.appName ?? 'app',
    appRelPath: opts.appRelPath ?? '.',
    checksum: opts.checksum ?? createHash('sha256').update(tgz).digest('hex'),
    size: tgz.length,
    env: opts.env ?? [],
  };
}

/** `bytes` cut into pieces of `size` (the last one shorter), as the repo-server chunks its tarball. */
export function chunksOf(bytes: Uint8Array, size: number): Buffer[] {
  if (!Number.isInteger(size) || size <= 0) throw new Error(`chunk size must be a positive integer, got ${size}`);
  const out: Buffer[] = [];
  for (let off = 0; off < bytes.length; off += size) out.push(Buffer.from(bytes.subarray(off, off + size)));
  return out;
}

export function metadataMessage(metadata: ManifestRequestMetadata): AppStreamRequest {
  return { metadata };
}

export function fileMessage(chunk: Uint8Array): AppStreamRequest {
  return { file: { chunk: Buffer.from(chunk) } };
}
