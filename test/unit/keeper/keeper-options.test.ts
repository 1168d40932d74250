import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compileOptions, DEFAULT_HTTP_ADDR } from '../../../cmp/config/options.js';

test('keeper settings: in-cluster defaults, overrides, strict values', () => {
  const k = compileOptions({ KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' }).keeper;
  assert.deepEqual(k, {
    argocdNamespace: 'argocd',
    graceMs: 15 * 60_000,
    resyncMs: 5 * 60_000,
    dryRun: false,
    apiQps: 5,
    apiUrl: 'https://10.96.0.1:443',
    apiTokenFile: '/var/run/secrets/kubernetes.io/serviceaccount/token',
    apiCaFile: '/var/run/secrets/kubernetes.io/serviceaccount/ca.crt',
  });
  assert.equal(compileOptions({ KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '6443' }).keeper.apiUrl, 'https://[fd00::1]:6443');
  assert.equal(compileOptions({}).keeper.apiUrl, undefined);
  const o = compileOptions({
    KUBERNETES_SERVICE_HOST: '10.96.0.1',
    CMP_OFFLOAD_KEEPER_API_URL: 'http://127.0.0.1:8001/',
    CMP_OFFLOAD_KEEPER_ARGOCD_NAMESPACE: 'gitops',
    CMP_OFFLOAD_KEEPER_GRACE: '0s',
    CMP_OFFLOAD_KEEPER_RESYNC: '30s',
    CMP_OFFLOAD_KEEPER_DRY_RUN: 'true',
    CMP_OFFLOAD_KEEPER_API_QPS: '0.5',
    CMP_OFFLOAD_KEEPER_API_TOKEN_FILE: '/t',
    CMP_OFFLOAD_KEEPER_API_CA_FILE: '/c',
  }).keeper;
  assert.deepEqual(o, { argocdNamespace: 'gitops', graceMs: 0, resyncMs: 30_000, dryRun: true, apiQps: 0.5, apiUrl: 'http://127.0.0.1:8001', apiTokenFile: '/t', apiCaFile: '/c' });
  for (const [name, value] of [
    ['CMP_OFFLOAD_KEEPER_ARGOCD_NAMESPACE', 'Argo_CD'],
    ['CMP_OFFLOAD_KEEPER_API_URL', 'ftp://x'],
    ['CMP_OFFLOAD_KEEPER_API_URL', 'https://x/api'],
    ['CMP_OFFLOAD_KEEPER_API_QPS', '0'],
    ['CMP_OFFLOAD_KEEPER_API_QPS', 'fast'],
    ['CMP_OFFLOAD_KEEPER_RESYNC', '0s'],
    ['CMP_OFFLOAD_KEEPER_DRY_RUN', 'yes'],
    ['CMP_OFFLOAD_KEEPER_GRACE', 'soon'],
  ] as const) {
    assert.throws(() => compileOptions({ [name]: value }), new RegExp(name), `${name}=${value}`);
  }
  assert.equal(DEFAULT_HTTP_ADDR.keeper, ':9103');
  assert.deepEqual(compileOptions({}, { role: 'keeper' }).http, { host: '0.0.0.0', port: 9103 });
});
