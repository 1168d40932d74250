import assert from 'node:assert/strict';
import { oneRunAtATime, startCmp, type CmpServer, type Mode } from '../../e2e/harness.js';
import { chunksOf, openCmpClient, repoMetadata, type CmpTestClient } from '../../helpers/grpc-client.js';
import { pluginYaml } from '../../helpers/plugin-yaml.js';
import { fetchListening, scrape } from '../../helpers/metrics.js';
import { freePort } from '../../helpers/redis-server.js';

const TOKEN = 'read-techniques-token-0123456789abcdef';

/** One app's manifest-generate-paths view on the traced server: the value, or why there is none. */
export interface View {
  value?: string;
  reason?: string;
  derivedAt: string;
}

/**
 * A traced server and a server with the cache off, same plugin and mode: the second one's
 * answer is what a fresh run gives.
 */
export interface TracedPair {
  traced: CmpTestClient;
  off: CmpTestClient;
  /** Ask both for `app` (source path `apps/<app>`, whole repository sent). */
  generate(tgz: Buffer, app: string): Promise<[unknown, unknown]>;
  /** The traced server's view of `app` once it reflects a generation answered at or after `since` (or stayed the same for a moment). */
  view(app: string, since: number): Promise<View | undefined>;
  /** The traced proxy's cmp_offload_traced_cache_total by result. */
  counts(): Promise<{ hit: number; miss: number; fallback: number }>;
  stderr(): string;
  stop(): Promise<void>;
}

export async function startPair(mode: Mode, name: string, spec: string, env: Record<string, string> = {}): Promise<TracedPair> {
  const port = await freePort();
  const servers: CmpServer[] = await Promise.all([
    startCmp(mode, {
      pluginYaml: pluginYaml(`${name}-traced`, spec),
      socketName: `${name}-traced.sock`,
      // A standalone proxy stores no answer of a run that overlapped another: one at a time, every
      // complete record counts (the suites require some).
      env: { ...env, CMP_OFFLOAD_CACHE: 'traced', CMP_OFFLOAD_HTTP_ADDR: 'off', ...oneRunAtATime(mode) },
      proxyEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${port}`, CMP_OFFLOAD_DASHBOARD_TOKEN: TOKEN },
      workers: 1,
    }),
    startCmp(mode, { pluginYaml: pluginYaml(`${name}-off`, spec), socketName: `${name}-off.sock`, env: { ...env, CMP_OFFLOAD_CACHE: 'off', CMP_OFFLOAD_HTTP_ADDR: 'off' }, workers: 1 }),
  ]);
  const [traced, off] = servers.map(s => openCmpClient(s.socketPath)) as [CmpTestClient, CmpTestClient];
  const ask = (c: CmpTestClient, tgz: Buffer, app: string) =>
    c.generate({
      metadata: repoMetadata(tgz, {
        appName: app,
        appRelPath: `apps/${app}`,
        env: [
          { name: 'ARGOCD_APP_NAME', value: app },
          { name: 'ARGOCD_APP_SOURCE_PATH', value: `apps/${app}` },
        ],
      }),
      chunks: chunksOf(tgz, 64 * 1024),
      timeoutMs: 60_000,
    });
  return {
    traced,
    off,
    generate: (tgz, app) => Promise.all([ask(traced, tgz, app), ask(off, tgz, app)]),
    async view(app, since) {
      let last = '';
      let sameSince = Date.now();
      for (const end = Date.now() + 10_000; ; await new Promise(r => setTimeout(r, 40))) {
        const res = await fetchListening(`http://127.0.0.1:${port}/generate-paths/${encodeURIComponent(app)}`, { headers: { authorization: `Bearer ${TOKEN}` } });
        const body = res.status === 404 ? undefined : ((await res.json()) as View);
        if (res.status !== 404) assert.equal(res.status, 200);
        const text = JSON.stringify(body);
        if (text !== last) [last, sameSince] = [text, Date.now()];
        if (body && Date.parse(body.derivedAt) >= since - 5) return body;
        // A generation deriving what is stored leaves the record as it was (see AppPathsStore.note).
        if (Date.now() - sameSince >= 300) return body;
        if (Date.now() > end) return body;
      }
    },
    async counts() {
      const m = await scrape(port);
      const n = (result: string) => m.get(`cmp_offload_traced_cache_total{result="${result}"}`) ?? 0;
      return { hit: n('hit'), miss: n('miss'), fallback: n('fallback') };
    },
    stderr: () => servers.map(s => s.stderr()).join('\n'),
    async stop() {
      traced.close();
      off.close();
      await Promise.all(servers.map(s => s.stop()));
    },
  };
}
