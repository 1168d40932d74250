import { callClientStream } from '../../cli/client-stream.js';
import { startDistributed } from '../../test/helpers/distributed.js';
import { openCmpClient } from '../../test/helpers/grpc-client.js';
import { rssBytes } from '../../test/helpers/rss.js';
import { profileEnv, RssSampler } from '../lib/processes.js';
import { pluginYaml } from '../../test/helpers/plugin-yaml.js';
import { fmt, MiB } from '../lib/stats.js';
import { tarballMessages } from '../lib/stream-file.js';
import { randomTarball } from '../lib/tarballs.js';
import { row, type Scenario } from '../lib/types.js';

const PLUGIN = pluginYaml('mem', `generate:\n  command: [sh, -c, "wc -c < big.bin | sed 's/^/size: /'"]`);

export const memory: Scenario = {
  name: 'memory',
  title: 'RSS growth of the proxy, the worker and its runner while a large incompressible tarball goes through (distributed mode)',
  async run(opts) {
    // 500 MiB, not 512: distributed mode keeps a tarball in one Redis string, and Redis refuses
    // strings over 512 MB (proto-max-bulk-len), which a 512 MiB tarball exceeds (docs/performance.md#found-while-benchmarking).
    const size = (opts.quick ? 64 : 500) * MiB;
    const t = await randomTarball(opts.outDir, `memory-${size / MiB}`, size);
    const d = await startDistributed({ pluginYaml: PLUGIN, socketName: 'mem.sock', workers: 1, env: profileEnv(opts, 'memory') });
    const client = openCmpClient(d.proxy.socketPath);
    try {
      // A first small request loads every code path, so the baseline includes what any request loads.
      const small = await randomTarball(opts.outDir, 'memory-warmup', MiB);
      await callClientStream(client.raw, 'generateManifest', tarballMessages(small, 64 * 1024));
      const pids = { proxy: d.proxy.proc.pid!, worker: d.workers[0]!.proc.pid!, runner: d.workers[0]!.runner!.proc.pid! };
      const base = { proxy: rssBytes(pids.proxy), worker: rssBytes(pids.worker), runner: rssBytes(pids.runner) };
      const sampler = new RssSampler([pids.proxy, pids.worker, pids.runner]);
      const res = await callClientStream(client.raw, 'generateManifest', tarballMessages(t, 64 * 1024));
      const peak = sampler.stop();
      if (!('value' in res) || res.value.manifests[0] !== `{"size":${size}}`) throw new Error(`unexpected answer: ${JSON.stringify(res)}`);
      return (['proxy', 'worker', 'runner'] as const).map(who => {
        const growth = peak.get(pids[who])! - base[who];
        return row({
          scenario: 'memory',
          case: `${who}, ${fmt.mib(t.size)} tarball (64 KiB chunks)`,
          measured: `peak ${fmt.mib(peak.get(pids[who])!)}`,
          baseline: `RSS before ${fmt.mib(base[who])}`,
          value: Math.round((growth / MiB) * 10) / 10,
          unit: 'MiB',
          target: { op: '<', value: 100 },
          details: { baselineBytes: base[who], peakBytes: peak.get(pids[who]), tarballBytes: t.size },
          note: opts.quick ? 'quick: 64 MiB' : '500 MiB: a 512 MiB tarball exceeds the 512 MB Redis string limit',
        });
      });
    } finally {
      client.close();
      await d.stop();
    }
  },
};
