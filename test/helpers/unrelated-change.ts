import path from 'node:path';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startCmp, type Mode } from '../e2e/harness.js';
import { openCmpClient } from './grpc-client.js';
import { scrape } from './metrics.js';
import { checkout, countRuns, generateApp, KUSTOMIZE_LIKE, monorepoFiles } from './monorepo.js';
import { pluginYaml } from './plugin-yaml.js';
import { freePort } from './redis-server.js';

/** What {@link unrelatedChange} saw. */
export interface UnrelatedChange {
  /** Plugin runs for the two requests. */
  runs: number;
  /** The proxy's cmp_offload_traced_cache_total by result. */
  hit: number;
  miss: number;
  fallback: number;
  /** Everything the server's processes wrote to stderr. */
  stderr: string;
  /** Distributed mode: the read records (`<prefix>:reads:…`) workers wrote to Redis; 0 in standalone mode. */
  readsKeys: number;
}

let serial = 0;

/**
 * How a server treats a change that its plugin cannot see. A KUSTOMIZE_LIKE plugin answers app
 * a01 of a 3-app monorepo (it reads apps/a01/ only); then README.md changes and a01 is asked
 * again. With a complete read record that change is a traced hit (1 run); keyed by the whole
 * tree (CMP_OFFLOAD_CACHE=on, or a traced run that fell back) the plugin runs again (2 runs).
 * `env` is every process's (CMP_OFFLOAD_CACHE included), `work` a dir the plugin may write to.
 */
export async function unrelatedChange(mode: Mode, work: string, opts: { env?: Record<string, string>; annotations?: Record<string, string>; workers?: number } = {}): Promise<UnrelatedChange> {
  const port = await freePort();
  const name = `unrelated${++serial}`;
  const server = await startCmp(mode, {
    pluginYaml: pluginYaml(name, KUSTOMIZE_LIKE, opts.annotations),
    socketName: `${name}.sock`,
    env: { CMP_OFFLOAD_HTTP_ADDR: 'off', ...opts.env },
    proxyEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${port}` },
    workers: opts.workers,
  });
  const client = openCmpClient(server.socketPath);
  try {
    const counter = path.join(work, `${name}-runs`);
    const dir = path.join(work, `${name}-repo`);
    const files = monorepoFiles(3);
    const ok = async (tgz: Buffer) => {
      const out = await generateApp(client, tgz, 'a01', 1, counter);
      assert.ok('value' in out && out.value.manifests.includes('{"replicas":1,"src":"config.yaml"}'), JSON.stringify(out));
    };
    await ok(await checkout(dir, files));
    files['README.md'] = 'changed, and read by no plugin\n';
    await ok(await checkout(dir, files));
    const m = await scrape(port);
    const traced = (result: string) => m.get(`cmp_offload_traced_cache_total{result="${result}"}`) ?? 0;
    let readsKeys = 0;
    if (server.redisUrl) {
      const redis = new Redis(server.redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
      try {
        readsKeys = (await redis.keys('*:reads:*')).length;
      } finally {
        redis.disconnect();
      }
    }
    return { runs: countRuns(counter).length, hit: traced('hit'), miss: traced('miss'), fallback: traced('fallback'), stderr: server.stderr(), readsKeys };
  } finally {
    client.close();
    await server.stop();
  }
}
