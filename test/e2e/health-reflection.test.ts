import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { HEALTH_PROTO_DIR } from '../../proxy/health.js';
import { startProxy, type ProxyProcess } from '../helpers/proxy-process.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';

const require = createRequire(import.meta.url);
const REFLECTION_PROTO_DIR = path.join(path.dirname(require.resolve('@grpc/reflection/package.json')), 'build', 'proto');

const loaded = grpc.loadPackageDefinition(
  protoLoader.loadSync(['health/v1/health.proto', 'grpc/reflection/v1/reflection.proto', 'grpc/reflection/v1alpha/reflection.proto'], {
    includeDirs: [HEALTH_PROTO_DIR, REFLECTION_PROTO_DIR],
    keepCase: true,
    enums: String,
    defaults: true,
    oneofs: true,
  }),
) as any;

describe('health and reflection services (as argocd-cmp-server registers them)', () => {
  let proxy: ProxyProcess;
  before(async () => {
    proxy = await startProxy({ pluginYaml: pluginYaml('svc', 'generate: {command: [sh]}'), socketName: 'svc.sock' });
  });
  after(() => proxy.stop());

  test('Health.Check: "" is SERVING, any other name is NOT_FOUND "unknown service"', async () => {
    const client = new loaded.grpc.health.v1.Health(`unix://${proxy.socketPath}`, grpc.credentials.createInsecure());
    const check = (service: string) =>
      new Promise<unknown>(resolve => client.Check({ service }, (err: grpc.ServiceError | null, res: unknown) => resolve(err ? { code: err.code, details: err.details } : res)));
    assert.deepEqual(await check(''), { status: 'SERVING' });
    assert.deepEqual(await check('plugin.ConfigManagementPluginService'), { code: grpc.status.NOT_FOUND, details: 'unknown service' });
    client.close();
  });

  for (const version of ['v1', 'v1alpha'] as const) {
    test(`reflection ${version} lists the CMP service and serves plugin.proto under Argo's file name`, async () => {
      const client = new loaded.grpc.reflection[version].ServerReflection(`unix://${proxy.socketPath}`, grpc.credentials.createInsecure());
      const ask = (req: object) =>
        new Promise<any>((resolve, reject) => {
          const call = client.ServerReflectionInfo();
          call.on('data', (res: unknown) => {
            resolve(res);
            call.end();
          });
          call.on('error', reject);
          call.write(req);
        });
      const services = await ask({ list_services: '' });
      const names = services.list_services_response.service.map((s: { name: string }) => s.name);
      assert.ok(names.includes('plugin.ConfigManagementPluginService'), names.join(','));
      assert.ok(names.includes('grpc.health.v1.Health'), names.join(','));
      const file = await ask({ file_containing_symbol: 'plugin.ConfigManagementPluginService' });
      const descriptors: Buffer[] = file.file_descriptor_response.file_descriptor_proto;
      assert.ok(descriptors.some(d => d.includes('cmpserver/plugin/plugin.proto')));
      client.close();
    });
  }
});
