import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { openCmpClient } from '../helpers/grpc-client.js';
import { BIN } from '../helpers/paths.js';
import { assertOurError } from '../helpers/our-errors.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { descendants } from '../helpers/process-tree.js';
import { tarballOf } from '../helpers/repo.js';
import { rssBytes } from '../helpers/rss.js';
import { startProxy } from '../helpers/proxy-process.js';
import { generateCall } from '../integration/distributed-helpers.js';
import { MODES, startCmp, type CmpServer } from './harness.js';

/**
 * Plugin output built to cost the proxy (and worker and runner) memory or time: a YAML alias
 * bomb whose expansion is 2600 times its text, and a million tiny documents (fewer in `npm test`). Both modes, real
 * processes; the memory is each service process's RSS, sampled during the calls.
 */

const MiB = 1024 * 1024;
const SCALAR = 64 * 1024;
const ALIASES = 3000;
/**
 * Tiny documents in one output: a million in the full form (`npm run test:security`), 300,000 in
 * `npm test`. Splitting 300,000 on a request-serving loop blocked it ~4 s, well past the bound.
 */
const TINY_DOCS = process.env.CMP_SECURITY_FULL === '1' ? 1_000_000 : 300_000;
/** The hostile suites' allowance for a process's RSS over its baseline (docs/reliability.md): Node 24's high-water mark is higher. */
const RSS_ALLOWANCE_MIB = Number(process.versions.node.split('.')[0]) >= 24 ? 224 : 160;

const PLUGIN = pluginYaml('hostile-output', `generate:
  command: [sh, -c]
  args:
    - |
      case "$ARGOCD_ENV_MODE" in
        alias) printf 'kind: List\\nitems: [&b '; head -c ${SCALAR} /dev/zero | tr '\\0' x; yes ',*b' | head -n ${ALIASES} | tr -d '\\n'; echo ']' ;;
        stderr) yes 'une ligne d’erreur très longue' | head -c 60000 >&2; exit 3 ;;
        short) echo 'a short failure' >&2; exit 3 ;;
        tiny) awk 'BEGIN { for (i = 0; i < ${TINY_DOCS}; i++) printf "---\\na: 1\\n" }' ;;
        *) echo "kind: A" ;;
      esac`);

/** The bytes of the one manifest the alias bomb expands to, and of the message that would carry it. */
const aliasManifestBytes = `{"items":[${Array(ALIASES + 1).fill(`"${'x'.repeat(SCALAR)}"`).join(',')}],"kind":"List"}`.length;
const varintBytes = (n: number) => Math.ceil(Math.max(1, Math.log2(n + 1)) / 7);
const aliasMessageBytes = 5 + 1 + varintBytes(aliasManifestBytes) + aliasManifestBytes;

/** Every node process of the service (proxy and its ingest processes, workers, runners). */
function servicePids(server: CmpServer): number[] {
  return [server.proxyPid, ...server.backendPids].flatMap(descendants).filter(pid => {
    try {
      return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').some(a => a.endsWith('/bin/cmp-offload'));
    } catch {
      return false;
    }
  });
}

/** `proxy`, `worker` or `runner` (the launcher's subcommand), for the messages. */
function roleOf(pid: number): string {
  try {
    const args = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    return args[args.findIndex(a => a.endsWith('/bin/cmp-offload')) + 1] ?? '?';
  } catch {
    return 'gone';
  }
}

/** Samples each process's RSS until stopped; `growth()` is the largest rise over its first sample. */
function rssWatch(pids: number[]): { stop(): void; growth(): { pid: number; mib: number; all: string } } {
  const base = new Map<number, number>();
  const peak = new Map<number, number>();
  const roles = new Map(pids.map(pid => [pid, roleOf(pid)]));
  const sample = () => {
    for (const pid of pids) {
      try {
        const rss = rssBytes(pid);
        if (!base.has(pid)) base.set(pid, rss);
        peak.set(pid, Math.max(peak.get(pid) ?? 0, rss));
      } catch {
        // exited
      }
    }
  };
  sample();
  const timer = setInterval(sample, 20);
  return {
    stop: () => clearInterval(timer),
    growth() {
      let worst = { pid: 0, mib: 0 };
      const all: string[] = [];
      for (const [pid, p] of peak) {
        const mib = (p - base.get(pid)!) / MiB;
        all.push(`${roles.get(pid)} ${pid}: +${mib.toFixed(0)} MiB`);
        if (mib > worst.mib) worst = { pid, mib };
      }
      return { ...worst, all: all.join(', ') };
    },
  };
}

describe('hostile plugin output is bounded before it grows', () => {
  for (const mode of MODES) {
    test(`a 64 KiB scalar aliased 3000 times is refused at the message size limit, not expanded (${mode})`, async t => {
      const server = await startCmp(mode, { pluginYaml: PLUGIN, socketName: 'hostile-output.sock', workers: 1 });
      const client = openCmpClient(server.socketPath);
      try {
        const tgz = await tarballOf({ 'f.txt': 'x' });
        // A first call, so that the baseline has the code paths loaded.
        assert.deepEqual(await client.generate(generateCall(tgz, { MODE: 'small' }, { timeoutMs: 60_000 })), { value: { manifests: ['{"kind":"A"}'], sourceType: '' } });
        const watch = rssWatch(servicePids(server));
        try {
          // Twice: a refused answer is not cached, and the second costs what the first did.
          for (let i = 0; i < 2; i++) {
            const t0 = Date.now();
            const res = await client.generate(generateCall(tgz, { MODE: 'alias' }, { timeoutMs: 120_000 }));
            assert.ok('code' in res, `an answer was sent: ${JSON.stringify(res).slice(0, 200)}`);
            // What grpc-js says for any answer over ARGOCD_GRPC_MAX_SIZE_MB (default 100 MiB).
            assert.deepEqual(res, { code: Status.RESOURCE_EXHAUSTED, details: `Sent message larger than max (${aliasMessageBytes} vs. ${100 * MiB})` });
            assert.ok(Date.now() - t0 < 30_000, `took ${Date.now() - t0} ms`);
          }
        } finally {
          watch.stop();
        }
        // The expansion is 196 MB; it was 0.9-5.7 GB of RSS in a process. 160 MiB is the hostile
        // suite's allowance for a process's RSS over its baseline (README, Reliability).
        const { pid, mib, all } = watch.growth();
        t.diagnostic(`RSS ${all}`);
        assert.ok(mib < 160, `process ${pid} grew by ${mib.toFixed(0)} MiB (${all})`);
      } finally {
        client.close();
        await server.stop();
      }
    });

    test(`${TINY_DOCS.toLocaleString('en')} tiny documents do not hold up another app's request on the same proxy (${mode})`, async t => {
      // One proxy process: the requests share its event loop, as in the issue.
      const server = await startCmp(mode, { pluginYaml: PLUGIN, socketName: 'hostile-output.sock', workers: 2, proxyEnv: { CMP_OFFLOAD_PROXY_PROCESSES: '1' } });
      const client = openCmpClient(server.socketPath);
      const other = openCmpClient(server.socketPath, { ownConnection: true });
      try {
        const tgz = await tarballOf({ 'f.txt': 'x' });
        // Each call its own tree (no cache hit): the time of a real small request, at idle.
        let n = 0;
        const small = async () => {
          const t0 = performance.now();
          const res = await other.generate(generateCall(await tarballOf({ 'n.txt': String(n++) }), { MODE: 'small' }, { timeoutMs: 120_000, appName: `small-${n}` }));
          assert.deepEqual(res, { value: { manifests: ['{"kind":"A"}'], sourceType: '' } });
          return performance.now() - t0;
        };
        await small();
        const idle: number[] = [];
        for (let i = 0; i < 5; i++) idle.push(await small());
        const idleMs = idle.sort((a, b) => a - b)[2]!;

        const watch = rssWatch(servicePids(server));
        const big = client.generate(generateCall(tgz, { MODE: 'tiny' }, { timeoutMs: 300_000 }));
        let bigDone = false;
        void big.finally(() => (bigDone = true));
        // Small requests while the big output is produced and split.
        const during: number[] = [];
        while (!bigDone) {
          during.push(await small());
          await new Promise(r => setTimeout(r, 100));
        }
        watch.stop();
        const res = await big;
        assert.ok('value' in res, JSON.stringify(res).slice(0, 300));
        assert.equal(res.value.manifests.length, TINY_DOCS);
        assert.ok(res.value.manifests.every(m => m === '{"a":1}'));
        assert.ok(during.length >= 3, `only ${during.length} small requests during the big one`);
        // Within 2x its idle latency: the plugin's split takes one of this machine's 2 cores for 20-60 s,
        // which other sessions share too (load 18 at times: any one request here may wait a second
        // for a core, whatever the proxy does). So the median is held to 2x idle + 150 ms, and every
        // request to 2x idle + 1.5 s: a loop blocked by the split cost 13.8 s.
        const sorted = [...during].sort((a, b) => a - b);
        const median = sorted[Math.floor(sorted.length / 2)]!;
        const worst = sorted[sorted.length - 1]!;
        // A legitimate answer this time (9 MB of manifests for a million, under the message limit). No
        // serving loop holds it as strings, only as its encoding (docs/security.md#trust-boundary).
        const rss = watch.growth();
        t.diagnostic(`idle ${idleMs.toFixed(0)} ms, during: median ${median.toFixed(0)} ms, worst ${worst.toFixed(0)} ms over ${during.length} requests; RSS ${rss.all}`);
        const all = `idle ${idleMs.toFixed(0)} ms; all: ${during.map(d => d.toFixed(0)).join(' ')}`;
        assert.ok(median < 2 * idleMs + 150, `the small requests during the split took ${median.toFixed(0)} ms (median; ${all})`);
        assert.ok(worst < 2 * idleMs + 1500, `a small request took ${worst.toFixed(0)} ms during the split (${all})`);
        assert.ok(rss.mib < RSS_ALLOWANCE_MIB, `process ${rss.pid} grew by ${rss.mib.toFixed(0)} MiB (${rss.all})`);
      } finally {
        client.close();
        other.close();
        await server.stop();
      }
    });
  }

  /** `bin/cmp-offload generate DIR --socket SOCK` with the plugin env MODE; its exit, stderr and time. */
  async function cliGenerate(socket: string, mode: string): Promise<{ code: number | null; stderr: string; ms: number }> {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-cli-'));
    fs.writeFileSync(path.join(dir, 'f.txt'), 'x');
    const t0 = Date.now();
    try {
      const child = spawn(process.execPath, [BIN, 'generate', dir, '--socket', socket, '--plugin-env', `MODE=${mode}`, '--timeout', '120s'], { stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      const code = await new Promise<number | null>(resolve => child.on('close', resolve));
      return { code, stderr, ms: Date.now() - t0 };
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }

  for (const mode of MODES) {
    test(`generate shows a failed plugin's status at once, whatever its size (${mode})`, async () => {
      const server = await startCmp(mode, { pluginYaml: PLUGIN, socketName: 'hostile-output.sock', workers: 1 });
      try {
        const short = await cliGenerate(server.socketPath, 'short');
        assert.equal(short.code, 1);
        assert.match(short.stderr, /^rpc error: code = Unknown desc = error generating manifests: `sh -c [^`]*` failed exit status 3: a short failure\n$/);
        // 60 KB of stderr is over 100 KB as a grpc-message (percent-encoded), more than a Node
        // client can decode: nghttp2 takes no header field over 64 KiB, even Huffman-coded. Argo's server (grpc-go) resets such a call for a client that
        // announced that limit; so does ours, and the client says so at once (it hung for ~40 s).
        const long = await cliGenerate(server.socketPath, 'stderr');
        assert.equal(long.code, 1);
        assert.match(long.stderr, /^rpc error: code = Internal desc = Received RST_STREAM with code 2 \(Internal server error\)\ncmp-offload generate: the server reset the call; it does so when the call's status does not fit the 65535 bytes of headers/);
        assert.ok(long.ms < 20_000, `took ${long.ms} ms`);
      } finally {
        await server.stop();
      }
    });
  }

  test('an output the splitter cannot hold within its bounded heap fails that request only (standalone)', async () => {
    // 1 MiB messages and 6 MiB outputs: a 115 MiB splitter heap. One 5.4 MB YAML map needs more.
    const proxy = await startProxy({
      pluginYaml: PLUGIN.replace('*) echo "kind: A" ;;', `map) awk 'BEGIN { for (i = 0; i < 500000; i++) printf "k%d: 1\\n", i }' ;;\n        *) echo "kind: A" ;;`),
      socketName: 'hostile-output.sock',
      env: { ARGOCD_GRPC_MAX_SIZE_MB: '1', CMP_OFFLOAD_MAX_OUTPUT_BYTES: '6Mi', CMP_OFFLOAD_CACHE: 'off' },
    });
    const client = openCmpClient(proxy.socketPath);
    try {
      const tgz = await tarballOf({ 'f.txt': 'x' });
      const res = await client.generate(generateCall(tgz, { MODE: 'map' }, { timeoutMs: 120_000 }));
      assertOurError('splitFailed', res, ["it needed more than the splitter's 115 MiB heap"], { prefix: 'error generating manifests: ' });
      assert.deepEqual(await client.generate(generateCall(tgz, { MODE: 'small' }, { timeoutMs: 60_000 })), { value: { manifests: ['{"kind":"A"}'], sourceType: '' } });
    } finally {
      client.close();
      await proxy.stop();
    }
  });
});
