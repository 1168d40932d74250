import { startProxy } from '../../test/helpers/proxy-process.js';
import { cpuMs, profileEnv, TICKS_PER_S } from '../lib/processes.js';
import { fmt, median, MiB } from '../lib/stats.js';
import { textTarball } from '../lib/tarballs.js';
import { row, type Scenario } from '../lib/types.js';
import { PLUGIN, send } from './ingest.js';

/**
 * Proxy CPU per request for a tarball seen for the first time (hash, gunzip, tar parse, hash
 * every file, spool) against the same tarball sent again (hash only: the index is remembered).
 * MatchRepository with a fileName rule is answered from the index, so the call is ingest only.
 */
export const knownTarball: Scenario = {
  name: 'known-tarball',
  title: 'proxy CPU per request: a first-seen tarball vs a known one (remembered tree index), 1 KiB chunks',
  async run(opts) {
    const compressed = (opts.quick ? 4 : 16) * MiB;
    const seeds = opts.quick ? [1, 2] : [1, 2, 3];
    const [warmUp, ...tarballs] = await Promise.all([99, ...seeds].map(seed => textTarball(opts.outDir, `known-${compressed / MiB}-${seed}`, compressed * 6.1, seed)));
    const proxy = await startProxy({
      pluginYaml: PLUGIN,
      socketName: 'ingest.sock',
      env: { ...profileEnv(opts, 'known-tarball'), CMP_OFFLOAD_HTTP_ADDR: 'off' },
    });
    const pid = proxy.proc.pid!;
    const cpuOf = async (t: (typeof tarballs)[number]) => {
      const before = cpuMs(pid);
      await send(proxy.socketPath, t);
      return cpuMs(pid) - before;
    };
    const first: number[] = [];
    const known: number[] = [];
    try {
      // Both paths once before measuring: the first call of each pays for JIT compilation.
      await cpuOf(warmUp!);
      await cpuOf(warmUp!);
      for (const t of tarballs) {
        first.push(await cpuOf(t));
        for (let i = 0; i < 3; i++) known.push(await cpuOf(t));
      }
    } finally {
      await proxy.stop();
    }
    const firstMs = median(first);
    const knownMs = median(known);
    opts.log(`known-tarball: first-seen ${first.join(', ')} ms CPU, known ${known.join(', ')} ms CPU`);
    const t = tarballs[0]!;
    return [
      row({
        scenario: 'known-tarball',
        case: `realistic text, ${fmt.mib(t.size)} tarball (${(t.rawBytes / t.size).toFixed(1)}:1), ${t.files} files, proxy CPU (user + system) per MatchRepository (median)`,
        measured: `known ${knownMs.toFixed(0)} ms CPU`,
        baseline: `first-seen ${firstMs.toFixed(0)} ms CPU`,
        value: knownMs / firstMs,
        unit: '×',
        target: { op: '<=', value: 0.5 },
        details: { tarballBytes: t.size, rawBytes: t.rawBytes, firstSeenCpuMs: first, knownCpuMs: known, chunkBytes: 1024, clockTickMs: 1000 / TICKS_PER_S },
        note: `${tarballs.length} tarballs, each sent once first-seen then 3 times known, after a warm-up tarball; /proc CPU has 10 ms resolution${opts.quick ? '; quick: 4 MiB tarballs' : ''}`,
      }),
    ];
  },
};
