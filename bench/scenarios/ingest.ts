import { callClientStream, type StreamingRpc } from '../../cli/client-stream.js';
import { connectPlugin } from '../../cli/connect.js';
import { startProxy } from '../../test/helpers/proxy-process.js';
import { profileEnv } from '../lib/processes.js';
import { startBareServer } from '../lib/service.js';
import { pluginYaml } from '../../test/helpers/plugin-yaml.js';
import { fmt, MiB, msSince } from '../lib/stats.js';
import { tarballMessages } from '../lib/stream-file.js';
import { randomTarball, textTarball, type Tarball } from '../lib/tarballs.js';
import { row, type Row, type Scenario } from '../lib/types.js';

/** MatchRepository with a fileName rule is answered from the tree index: ingest and nothing else. */
export const PLUGIN = pluginYaml('ingest', 'discover:\n  fileName: "no-such-file.txt"\ngenerate:\n  command: [sh, -c, "true"]');

/**
 * One call (MatchRepository unless told) streaming the tarball in 1 KiB chunks on a connection of
 * its own, as the repo-server dials per request; ms until the answer.
 */
export async function send(socketPath: string, t: Tarball, rpc: StreamingRpc = 'matchRepository', meta: { appRelPath?: string } = {}): Promise<number> {
  const client = connectPlugin(socketPath, { ownConnection: true });
  try {
    const start = process.hrtime.bigint();
    const res = await callClientStream(client, rpc, tarballMessages(t, 1024, meta));
    const ms = msSince(start);
    if (!('value' in res)) throw new Error(`${rpc} failed: ${JSON.stringify(res)}`);
    return ms;
  } finally {
    client.close();
  }
}

export const ingest: Scenario = {
  name: 'ingest',
  title: 'proxy ingest (sha256, gunzip, tar index, spool) vs a bare grpc-js server that only hashes, 1 KiB chunks',
  async run(opts) {
    const compressed = (opts.quick ? 16 : 64) * MiB;
    const inputs = [
      { label: 'realistic text', t: await textTarball(opts.outDir, `ingest-text-${compressed / MiB}`, compressed * 6.1) },
      { label: 'incompressible', t: await randomTarball(opts.outDir, `ingest-random-${compressed / MiB}`, compressed) },
    ];
    const bare = await startBareServer(profileEnv(opts, 'ingest'));
    // A 1-byte memo remembers no index: every call is first-seen (the known-tarball scenario measures the memo).
    const env = { ...profileEnv(opts, 'ingest'), CMP_OFFLOAD_INDEX_MEMO_BYTES: '1', CMP_OFFLOAD_HTTP_ADDR: 'off' };
    const proxy = await startProxy({ pluginYaml: PLUGIN, socketName: 'ingest.sock', env });
    const rows: Row[] = [];
    try {
      for (const { label, t } of inputs) {
        // Alternate and keep the best of each: the machine is shared and noisy.
        const b: number[] = [];
        const p: number[] = [];
        for (let i = 0; i < (opts.quick ? 1 : 2); i++) {
          b.push(await send(bare.socketPath, t));
          p.push(await send(proxy.socketPath, t));
        }
        const bareMs = Math.min(...b);
        const proxyMs = Math.min(...p);
        opts.log(`ingest ${label}: bare ${bareMs.toFixed(0)} ms, proxy ${proxyMs.toFixed(0)} ms`);
        rows.push(
          row({
            scenario: 'ingest',
            case: `${label}, ${fmt.mib(t.size)} tarball (${(t.rawBytes / t.size).toFixed(1)}:1), ${t.files} files`,
            measured: `${fmt.rate(t.size, proxyMs)} (${fmt.s(proxyMs)})`,
            baseline: `${fmt.rate(t.size, bareMs)} (${fmt.s(bareMs)})`,
            value: bareMs / proxyMs,
            unit: '×',
            target: { op: '>=', value: 0.7 },
            details: { tarballBytes: t.size, rawBytes: t.rawBytes, proxyMs: p, bareMs: b, chunkBytes: 1024 },
            note: opts.quick ? 'quick: 16 MiB tarballs, one run each' : undefined,
          }),
        );
      }
    } finally {
      await proxy.stop();
      await bare.stop();
    }
    return rows;
  },
};
