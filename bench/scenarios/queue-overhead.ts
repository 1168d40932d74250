import { startDistributed } from '../../test/helpers/distributed.js';
import { openCmpClient, type CmpTestClient } from '../../test/helpers/grpc-client.js';
import { startProxy } from '../../test/helpers/proxy-process.js';
import { tarballOf } from '../../test/helpers/repo.js';
import { generateCall, timedGenerate } from '../lib/calls.js';
import { profileEnv } from '../lib/processes.js';
import { pluginYaml } from '../../test/helpers/plugin-yaml.js';
import { fmt, pct } from '../lib/stats.js';
import { row, type Scenario } from '../lib/types.js';

const PLUGIN = pluginYaml('trivial', `generate:\n  command: [sh, -c, "printf 'kind: ConfigMap\\\\nmetadata:\\\\n  name: x\\\\n'"]`);
const WARMUP = 20;

/** Calls in a row to one mode before the other's turn (see `latencies`). */
const BLOCK = 10;

/**
 * Sequential requests, to each mode in turn by blocks of BLOCK, so that both see the same machine
 * over the run while each has it to itself (a distributed call leaves work behind it: BullMQ's
 * next fetch, the runner's sweep); sorted latencies of each after a warm-up.
 */
async function latencies(clients: CmpTestClient[], tgz: Buffer, n: number): Promise<number[][]> {
  const call = generateCall(tgz);
  const times: number[][] = clients.map(() => []);
  for (let i = 0; i < WARMUP + n; i += BLOCK) {
    for (const [j, client] of clients.entries()) {
      for (let k = i; k < i + BLOCK; k++) {
        const { ms } = await timedGenerate(client, call);
        if (k >= WARMUP) times[j]!.push(ms);
      }
    }
  }
  return times.map(t => t.sort((a, b) => a - b));
}

export const queueOverhead: Scenario = {
  name: 'queue-overhead',
  title: 'what the queue costs: GenerateManifest of a trivial plugin (cache off), distributed (1 proxy + 2 workers) minus standalone, calls to the two in alternating blocks',
  async run(opts) {
    const n = opts.quick ? 60 : 200;
    const env = { CMP_OFFLOAD_CACHE: 'off', ...profileEnv(opts, 'queue-overhead') };
    const tgz = await tarballOf({ 'f.txt': 'x' });
    const standalone = await startProxy({ pluginYaml: PLUGIN, socketName: 'trivial.sock', env });
    const distributed = await startDistributed({ pluginYaml: PLUGIN, socketName: 'trivial.sock', workers: 2, env });
    const local = openCmpClient(standalone.socketPath);
    const remote = openCmpClient(distributed.proxy.socketPath);
    try {
      const [s, q] = (await latencies([local, remote], tgz, n)) as [number[], number[]];
      const p50 = pct(q, 50) - pct(s, 50);
      const p99 = pct(q, 99) - pct(s, 99);
      return [
        row({
          scenario: 'queue-overhead',
          case: `${n} sequential requests, trivial plugin; p50 (p99) distributed − standalone`,
          measured: `distributed p50 ${fmt.ms(pct(q, 50))}, p99 ${fmt.ms(pct(q, 99))}`,
          baseline: `standalone p50 ${fmt.ms(pct(s, 50))}, p99 ${fmt.ms(pct(s, 99))}`,
          value: p50,
          unit: 'ms',
          // The queue hop (docs/performance.md#queue-hop): a handful of Redis round trips.
          target: { op: '<=', value: 3 },
          details: { p50OverheadMs: p50, p99OverheadMs: p99, standaloneMs: s, distributedMs: q },
          note: `p99 overhead ${fmt.ms(p99)}`,
        }),
      ];
    } finally {
      local.close();
      remote.close();
      await standalone.stop();
      await distributed.stop();
    }
  },
};
