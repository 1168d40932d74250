import { appName } from '../../test/helpers/monorepo.js';
import { pluginYaml } from '../../test/helpers/plugin-yaml.js';
import { pool } from '../../test/helpers/pool.js';
import { startProxy } from '../../test/helpers/proxy-process.js';
import { cpuMs, profileEnv, RssSampler } from '../lib/processes.js';
import { startBareServer } from '../lib/service.js';
import { fmt, MiB } from '../lib/stats.js';
import { monorepoTarball, textTarball, type Tarball } from '../lib/tarballs.js';
import { row, type Scenario } from '../lib/types.js';
import { send } from './ingest.js';

/** Requests in flight at once, as the repo-server's parallel refreshes send them. */
const IN_FLIGHT = 4;

/**
 * A kustomize-like plugin reduced to its output (the app's YAML files), and a fileName rule
 * that MatchRepository answers from the tree index: that call is ingest and nothing else.
 */
const PLUGIN = pluginYaml('storm-large', 'discover:\n  fileName: "no-such-file.txt"\ngenerate:\n  command: [sh, -c, "cat *.yaml 2>/dev/null; true"]');

interface Pass {
  /** Wall time of all the requests. */
  ms: number;
  /** CPU (user + system) of the server process over the pass, per request. */
  cpuPerRequestMs: number;
}

/** GenerateManifest for `apps` apps (apps/aNN), IN_FLIGHT at a time; `children` counts the server's waited-for children too. */
async function refresh(socketPath: string, pid: number, t: Tarball, apps: number, children = false): Promise<Pass> {
  const cpu = cpuMs(pid, children);
  const start = Date.now();
  await pool(
    Array.from({ length: apps }, (_, i) => appName(i + 1)),
    IN_FLIGHT,
    app => send(socketPath, t, 'generateManifest', { appRelPath: `apps/${app}` }),
  );
  return { ms: Date.now() - start, cpuPerRequestMs: (cpuMs(pid, children) - cpu) / apps };
}

/** Server CPU of one request, alone. */
async function cpuOfOne(socketPath: string, pid: number, t: Tarball): Promise<number> {
  const before = cpuMs(pid);
  await send(socketPath, t);
  return cpuMs(pid) - before;
}

/**
 * Issue 12's large monorepo: the whole repository (YAML-like text and binary assets, thousands of
 * files) sent for each of N Applications in Argo's 1 KiB chunks, several in flight, to one
 * standalone proxy with the content cache on. Against the same stream to the bare grpc-js server
 * (receive + sha256: the floor) and to a stock-like one (also gunzips and writes every file, as
 * argocd-cmp-server does before each run). One proxy process only: there is no multi-process
 * proxy yet to compare with.
 */
export const stormLarge: Scenario = {
  name: 'storm-large',
  title: 'large monorepo sent whole per app, 1 KiB chunks, standalone proxy with cache: proxy CPU per request vs the bare grpc-js floor',
  async run(opts) {
    const apps = opts.quick ? 6 : 10;
    const t = await monorepoTarball(opts.outDir, `storm-large-${opts.quick ? 6 : 30}`, (opts.quick ? 6 : 30) * MiB, apps);
    const warmUp = await textTarball(opts.outDir, 'storm-large-warm-up', 6 * MiB, 99);
    opts.log(`storm-large: ${fmt.mib(t.size)} tarball, ${fmt.mib(t.rawBytes)} tar, ${t.files} files, ${apps} apps, ${IN_FLIGHT} in flight`);
    opts.log('storm-large: one proxy process only (a multi-process proxy does not exist yet: no rows for 2 processes)');
    const env = profileEnv(opts, 'storm-large');

    // The floor and stock-like servers, each warmed up on a small tarball first (JIT).
    const floor: Pass[] = [];
    let stock: Pass;
    const bare = await startBareServer(env);
    const stockServer = await startBareServer(env, true);
    try {
      await send(bare.socketPath, warmUp);
      await send(stockServer.socketPath, warmUp);
      floor.push(await refresh(bare.socketPath, bare.proc.pid!, t, apps));
      stock = await refresh(stockServer.socketPath, stockServer.proc.pid!, t, apps, true);
    } finally {
      await stockServer.stop();
    }

    const proxy = await startProxy({ pluginYaml: PLUGIN, socketName: 'storm-large.sock', env: { ...env, CMP_OFFLOAD_HTTP_ADDR: 'off', CMP_OFFLOAD_CACHE: 'on' } });
    const pid = proxy.proc.pid!;
    const rss = new RssSampler([pid]);
    let firstSeenMs: number, knownMatchMs: number, cold: Pass, warm: Pass;
    try {
      // Both ingest paths once before measuring: the first call of each pays for JIT compilation.
      await send(proxy.socketPath, warmUp);
      await send(proxy.socketPath, warmUp);
      firstSeenMs = await cpuOfOne(proxy.socketPath, pid, t);
      knownMatchMs = await cpuOfOne(proxy.socketPath, pid, t);
      // Every app runs once (cache misses, an extraction each), then the refresh that finds them all cached.
      cold = await refresh(proxy.socketPath, pid, t, apps);
      warm = await refresh(proxy.socketPath, pid, t, apps);
    } finally {
      rss.stop();
      await proxy.stop();
    }
    // The floor again after the proxy: the machine's load moves; the lower of the two is kept.
    try {
      floor.push(await refresh(bare.socketPath, bare.proc.pid!, t, apps));
    } finally {
      await bare.stop();
    }
    const floorMs = Math.min(...floor.map(f => f.cpuPerRequestMs));
    const rssMiB = (rss.peak.get(pid) ?? 0) / MiB;
    opts.log(
      `storm-large: CPU per request: floor ${floor.map(f => f.cpuPerRequestMs.toFixed(0)).join(' / ')} ms, stock-like ${stock.cpuPerRequestMs.toFixed(0)} ms, ` +
        `proxy first-seen ${firstSeenMs} ms, known (match) ${knownMatchMs} ms, cold refresh ${cold.cpuPerRequestMs.toFixed(0)} ms, refresh (all cached) ${warm.cpuPerRequestMs.toFixed(0)} ms`,
    );
    opts.log(`storm-large: wall: cold refresh ${fmt.s(cold.ms)}, refresh ${fmt.s(warm.ms)}, stock-like ${fmt.s(stock.ms)}, floor ${floor.map(f => fmt.s(f.ms)).join(' / ')}; proxy peak RSS ${rssMiB.toFixed(0)} MiB`);
    const common = `${fmt.mib(t.size)} monorepo (${t.files} files, text and binary), ${apps} apps, ${IN_FLIGHT} in flight, 1 KiB chunks, 1 standalone proxy, cache on`;
    const details = { tarballBytes: t.size, rawBytes: t.rawBytes, files: t.files, apps, inFlight: IN_FLIGHT, floor, stock, firstSeenMs, knownMatchMs, cold, warm, proxyPeakRssMiB: rssMiB };
    const note = `CPU from /proc (10 ms ticks); floor: the lower of a pass before and one after the proxy; no rows for 2 proxy processes (not built yet)${opts.quick ? '; quick: 6 MiB tarball, 6 apps' : ''}`;
    return [
      row({
        scenario: 'storm-large',
        case: `${common}; refresh with every app cached (known tarball), proxy CPU per request`,
        measured: `${warm.cpuPerRequestMs.toFixed(0)} ms CPU, refresh ${fmt.s(warm.ms)}, peak RSS ${rssMiB.toFixed(0)} MiB`,
        baseline: `bare grpc-js floor ${floorMs.toFixed(0)} ms CPU; stock-like ${stock.cpuPerRequestMs.toFixed(0)} ms CPU, ${fmt.s(stock.ms)}`,
        value: warm.cpuPerRequestMs / floorMs,
        unit: '×',
        target: { op: '<=', value: 1.1 },
        details,
        note,
      }),
      row({
        scenario: 'storm-large',
        case: `${common}; first-seen tarball (MatchRepository answered from the index: ingest only), proxy CPU`,
        measured: `${firstSeenMs} ms CPU (known: ${knownMatchMs} ms); cold refresh ${fmt.s(cold.ms)}`,
        baseline: `bare grpc-js floor ${floorMs.toFixed(0)} ms CPU`,
        value: firstSeenMs / floorMs,
        unit: '×',
        target: { op: '<=', value: 1.6 },
        details: {},
      }),
    ];
  },
};
