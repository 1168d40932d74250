import { createRequire } from 'node:module';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

const require = createRequire(import.meta.url);
/** health.proto as grpc-health-check ships it (loaded, not copied). */
export const HEALTH_PROTO_DIR = path.join(path.dirname(require.resolve('grpc-health-check/package.json')), 'proto');

const SERVING = 'SERVING';

/**
 * grpc.health.v1.Health as grpc-go's health.NewServer() behaves in argocd-cmp-server
 * (docs/argo-contract.md#services): service "" is SERVING, any other name is NOT_FOUND `unknown service`,
 * and the status never changes.
 */
export function addHealthService(server: grpc.Server, pkg: protoLoader.PackageDefinition): void {
  const service = (grpc.loadPackageDefinition(pkg) as any).grpc.health.v1.Health.service as grpc.ServiceDefinition;
  server.addService(service, {
    check(call: grpc.ServerUnaryCall<{ service: string }, unknown>, cb: grpc.sendUnaryData<unknown>) {
      if (call.request.service === '') cb(null, { status: SERVING });
      else cb({ code: grpc.status.NOT_FOUND, details: 'unknown service' });
    },
    watch(call: grpc.ServerWritableStream<{ service: string }, unknown>) {
      // grpc-go answers an unknown service with SERVICE_UNKNOWN and keeps the stream open.
      call.write({ status: call.request.service === '' ? SERVING : 'SERVICE_UNKNOWN' });
    },
    list(_call: unknown, cb: grpc.sendUnaryData<unknown>) {
      cb(null, { statuses: { '': { status: SERVING } } });
    },
  });
}
