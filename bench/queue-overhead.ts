/**
 * What the queue costs: p50/p95 latency of GenerateManifest for a trivial plugin with the cache
 * off, standalone vs distributed (1 proxy + 2 workers on a throwaway local redis-server), measured
 * in the same run. `npx tsx bench/queue-overhead.ts [requests]` (needs `npm run build` and redis-server).
 */
import { startDistributed } from '../test/helpers/distributed.js';
import { openCmpClient, chunksOf, repoMetadata, type CmpTestClient } from '../test/helpers/grpc-client.js';
import { startProxy } from '../test/helpers/proxy-process.js';
import { tarballOf } from '../test/helpers/repo.js';

const PLUGIN = `apiVersion: argoproj.io/v1alpha1
kind: ConfigManagementPlugin
metadata:
  name: trivial
spec:
  generate:
    command: [sh, -c, "printf 'kind: ConfigMap\\\\nmetadata:\\\\n  name: x\\\\n'"]
`;
const N = Number(process.argv[2] ?? 200);
const WARMUP = 20;
const env = { CMP_OFFLOAD_CACHE: 'off' };

async function measure(client: CmpTestClient, tgz: Buffer): Promise<number[]> {
  const call = { metadata: repoMetadata(tgz, { env: [{ name: 'ARGOCD_APP_NAME', value: 'bench' }] }), chunks: chunksOf(tgz, 1024) };
  const times: number[] = [];
  for (let i = 0; i < WARMUP + N; i++) {
    const t = process.hrtime.bigint();
    const outcome = await client.generate(call);
    if (!('value' in outcome)) throw new Error(`request failed: ${JSON.stringify(outcome)}`);
    if (i >= WARMUP) times.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  return times.sort((a, b) => a - b);
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

const tgz = await tarballOf({ 'f.txt': 'x' });
const standalone = await startProxy({ pluginYaml: PLUGIN, socketName: 'trivial.sock', env });
const distributed = await startDistributed({ pluginYaml: PLUGIN, socketName: 'trivial.sock', workers: 2, env });
const local = openCmpClient(standalone.socketPath);
const remote = openCmpClient(distributed.proxy.socketPath);
try {
  const s = await measure(local, tgz);
  const q = await measure(remote, tgz);
  const row = (name: string, t: number[]) => `${name.padEnd(12)} p50 ${pct(t, 50).toFixed(2)} ms   p95 ${pct(t, 95).toFixed(2)} ms`;
  process.stdout.write(
    `GenerateManifest, trivial plugin, cache off, ${N} sequential requests (after ${WARMUP} warm-up)\n` +
      `${row('standalone', s)}\n${row('distributed', q)}\n` +
      `queue overhead (p50 distributed - p50 standalone): ${(pct(q, 50) - pct(s, 50)).toFixed(2)} ms\n`,
  );
} finally {
  local.close();
  remote.close();
  await standalone.stop();
  await distributed.stop();
}
