import fs from 'node:fs';
import http2 from 'node:http2';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import { discoveryConfigured } from '../cmp/config/plugin-config.js';
import type { Logger } from '../cmp/log.js';
import type { PluginResult } from '../cmp/plugin/request.js';
import {
  ConfigManagementPluginServiceService,
  type CheckPluginConfigurationResponse,
  type ManifestResponse,
  type ParametersAnnouncementResponse,
  type RepositoryResponse,
} from '../proto/generated/cmpserver/plugin/plugin.js';
import { addHealthService, HEALTH_PROTO_DIR } from './health.js';
import { decodeAppStreamRequest } from './ingest/decode-request.js';
import { streamingRpc, type StreamingRpcDeps } from './rpc/streaming-rpc.js';
import { preparedOf } from '../cmp/split/prepared.js';

/** proto/ at the repo root, from proxy/ in the sources or dist/proxy/ once compiled. */
function protoDir(): string {
  const here = path.dirname(fileURLToPath(import.meta.url));
  return path.resolve(here, here.includes(`${path.sep}dist${path.sep}`) ? '../../proto' : '../proto');
}

const generated = ConfigManagementPluginServiceService;

/** The CMP service with the streaming RPCs' file chunks decoded without copies (decode-request.ts). */
const CMP_SERVICE = {
  ...generated,
  generateManifest: {
    ...generated.generateManifest,
    requestDeserialize: decodeAppStreamRequest,
    // A result prepared off the loop (a split or result thread) is sent as its encoding (toResponse keeps it).
    responseSerialize: (r: ManifestResponse) => preparedOf(r)?.encoded ?? generated.generateManifest.responseSerialize(r),
  },
  matchRepository: { ...generated.matchRepository, requestDeserialize: decodeAppStreamRequest },
  getParametersAnnouncement: { ...generated.getParametersAnnouncement, requestDeserialize: decodeAppStreamRequest },
};

/**
 * Build the gRPC server argocd-cmp-server registers (docs/argo-contract.md#services): the CMP service,
 * health and reflection (v1 and v1alpha), with Argo's message size limit both ways. No bind.
 */
export function buildGrpcServer(deps: StreamingRpcDeps): grpc.Server {
  const max = deps.engine.options.maxMessageBytes;
  const server = new grpc.Server({
    'grpc.max_receive_message_length': max,
    'grpc.max_send_message_length': max,
    interceptors: [statusWithinPeerLimit],
  });
  const config = deps.engine.config;
  server.addService(CMP_SERVICE, {
    // A prepared result goes to responseSerialize as it is: reading its manifests would decode them.
    generateManifest: streamingRpc<ManifestResponse>(deps, 'generate', r =>
      preparedOf(r)
        ? (r as unknown as ManifestResponse)
        : {
            manifests: (r as Extract<PluginResult, { kind: 'generate' }>).manifests,
            sourceType: '',
          },
    ),
    matchRepository: streamingRpc<RepositoryResponse>(deps, 'match', r => {
      const m = r as Extract<PluginResult, { kind: 'match' }>;
      return { isSupported: m.isSupported, isDiscoveryEnabled: m.isDiscoveryEnabled };
    }),
    getParametersAnnouncement: streamingRpc<ParametersAnnouncementResponse>(deps, 'parameters', r => ({
      parameterAnnouncements: (r as Extract<PluginResult, { kind: 'parameters' }>).parameterAnnouncements,
    })),
    checkPluginConfiguration: (_call: unknown, cb: grpc.sendUnaryData<CheckPluginConfigurationResponse>) =>
      cb(null, { isDiscoveryConfigured: discoveryConfigured(config), provideGitCreds: config.spec.provideGitCreds }),
  });
  const loaderOptions = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true };
  const health = protoLoader.loadSync('health/v1/health.proto', { ...loaderOptions, includeDirs: [HEALTH_PROTO_DIR] });
  addHealthService(server, health);
  // From buf's descriptor set, so that reflection names the files as Argo's do
  // (`cmpserver/plugin/plugin.proto`); proto-loader's .proto parsing keeps only base names.
  const contract = protoLoader.loadFileDescriptorSetFromBuffer(fs.readFileSync(path.join(protoDir(), 'descriptor.binpb')), loaderOptions);
  new ReflectionService({ ...contract, ...health }).addToServer(server);
  return server;
}

/**
 * grpc-go's rule for a status the client said it cannot receive: when the trailers (name + value
 * + 32 bytes per field, RFC 7541) exceed the SETTINGS_MAX_HEADER_LIST_SIZE the client announced,
 * the stream is reset with INTERNAL instead. A client announcing no limit (the repo-server's
 * grpc-go client, Node's default) gets every status whole, as from Argo's server.
 */
const statusWithinPeerLimit: grpc.ServerInterceptor = (_method, call) =>
  new grpc.ServerInterceptingCall(call, {
    sendStatus(status, next) {
      // grpc-js's innermost call holds the HTTP/2 stream (no public accessor).
      const stream = (call as unknown as { stream?: http2.ServerHttp2Stream }).stream;
      const limit = stream?.session?.remoteSettings.maxHeaderListSize;
      if (stream && limit !== undefined && statusHeaderListBytes(status) > limit) stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
      next(status);
    },
  });

/** The header list of a trailers-only status as grpc-js sends it, counted as RFC 7541 does. */
function statusHeaderListBytes(status: { code: number; details?: string; metadata?: grpc.Metadata | null }): number {
  const field = (name: string, value: string) => name.length + Buffer.byteLength(value) + 32;
  let n = field(':status', '200') + field('content-type', 'application/grpc+proto') + field('grpc-status', String(status.code));
  n += field('grpc-message', encodeURI(status.details ?? ''));
  for (const [k, v] of Object.entries(status.metadata?.toHttp2Headers() ?? {})) n += field(k, String(v));
  return n;
}

/**
 * Stop accepting and let in-flight requests finish within `graceMs`; past it, cancel them (their
 * runs are killed through their contexts). Resolves when the server is closed; the requests'
 * promises in `inflight` may still be settling.
 */
export async function drainGrpcServer(server: grpc.Server, inflight: Set<Promise<unknown>>, graceMs: number, log: Logger): Promise<void> {
  const graceful = new Promise<void>(resolve => server.tryShutdown(() => resolve()));
  const grace = new Promise<'timeout'>(resolve => setTimeout(() => resolve('timeout'), graceMs).unref());
  if ((await Promise.race([graceful.then(() => 'done' as const), grace])) === 'timeout') {
    log.warn({ inflight: inflight.size }, 'grace period over, cancelling in-flight requests');
    server.forceShutdown();
  }
}
