import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { chunksOf, openCmpClient, repoMetadata, type CmpTestClient } from '../helpers/grpc-client.js';
import { scrape } from '../helpers/metrics.js';
import { BIN, REPO_ROOT } from '../helpers/paths.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { ingestPids } from '../helpers/process-tree.js';
import { freePort } from '../helpers/redis-server.js';
import { tarballOf } from '../helpers/repo.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { eventually, leftovers, MODES, startCmp, type CmpServer } from './harness.js';

/**
 * CMP_OFFLOAD_PROXY_PROCESSES=2 (issue 12): a coordinator and two ingest processes serve the one
 * plugin socket. What holds for one process holds across them: an answer produced in one is a
 * cache hit in the other, identical requests in flight in both run once, /metrics is one view,
 * shutdown drains all; and a killed ingest process is replaced while the socket keeps answering.
 * Which process received a request is read from /proc (the files it holds, its memo misses).
 */

const counterDir = pluginWritableTempDir('cmp-procs-');
after(() => fs.rmSync(counterDir, { recursive: true, force: true }));

const GENERATE = `generate:
  command: [sh, -c]
  args: ["echo run >> $COUNTER; sleep \${SLEEP:-0}; printf 'k: %s\\\\n' \\"$(cat f.txt)\\""]`;

function runs(counter: string): number {
  return fs.existsSync(counter) ? fs.readFileSync(counter, 'utf8').split('\n').filter(Boolean).length : 0;
}

/** Files under `dir` that process `pid` has open now. */
function openUnder(pid: number, dir: string): string[] {
  const out: string[] = [];
  let fds: string[] = [];
  try {
    fds = fs.readdirSync(`/proc/${pid}/fd`);
  } catch {
    return out;
  }
  for (const fd of fds) {
    try {
      const target = fs.readlinkSync(`/proc/${pid}/fd/${fd}`);
      if (target.startsWith(`${dir}/`)) out.push(target);
    } catch {
      // closed between the listing and the read
    }
  }
  return out;
}

/** The ops HTTP server starts in the background, after the socket: wait until /metrics answers. */
async function untilMetrics(port: number): Promise<void> {
  const end = Date.now() + 10_000;
  while (!(await scrape(port).then(() => true, () => false))) {
    assert.ok(Date.now() < end, 'the proxy never served /metrics');
    await new Promise(r => setTimeout(r, 50));
  }
}

async function onOwnConnection<T>(server: CmpServer, fn: (c: CmpTestClient) => Promise<T>): Promise<T> {
  const c = openCmpClient(server.socketPath, { ownConnection: true });
  try {
    return await fn(c);
  } finally {
    c.close();
  }
}

for (const mode of MODES) {
  describe(`two proxy processes (${mode})`, () => {
    let server: CmpServer;
    let port: number;
    let oks = 0;

    before(async () => {
      port = await freePort();
      server = await startCmp(mode, {
        pluginYaml: pluginYaml('procs', GENERATE),
        socketName: 'procs.sock',
        env: { CMP_OFFLOAD_PROXY_PROCESSES: '2', CMP_OFFLOAD_CACHE: 'on', CMP_OFFLOAD_HTTP_ADDR: 'off' },
        proxyEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${port}` },
      });
      await eventually(() => ingestPids(server.proxyPid).length === 2, 10_000, 'two ingest processes');
      await untilMetrics(port);
    });
    after(async () => {
      // A proxy that died during the suite says why here.
      if (server) assert.equal(await server.stop(), 0, server.stderr());
    });

    /** One call on a connection of its own, as the repo-server makes them. */
    async function generate(tgz: Buffer, counter: string, env: Array<{ name: string; value: string }> = []) {
      const out = await onOwnConnection(server, c => c.generate({ metadata: repoMetadata(tgz, { env: [{ name: 'COUNTER', value: counter }, ...env] }), chunks: chunksOf(tgz, 1024) }));
      if ('value' in out) oks++;
      return out;
    }

    async function counts() {
      const m = await scrape(port);
      return {
        memoMiss: m.get('cmp_offload_index_memo_lookups_total{result="miss"}') ?? 0,
        hit: m.get('cmp_offload_cache_lookups_total{result="hit"}') ?? 0,
        coalesced: m.get('cmp_offload_cache_lookups_total{result="coalesced"}') ?? 0,
        ok: m.get('cmp_offload_requests_total{rpc="generate",outcome="OK"}') ?? 0,
      };
    }

    test('two large requests are received by different ingest processes at the same time', async () => {
      const pids = ingestPids(server.proxyPid);
      // Incompressible, distinct: each request spools its own tarball while it is received.
      const tarballs = await Promise.all([0, 1].map(() => tarballOf({ 'f.txt': 'x', 'blob.bin': randomBytes(2 * 1024 * 1024).toString('base64') })));
      const root = server.workRoots[0]!;
      // Sent in full but never half-closed: each stays in ingest (its spool file open) until its deadline.
      const calls = tarballs.map(tgz => onOwnConnection(server, c => c.generate({ metadata: repoMetadata(tgz), chunks: chunksOf(tgz, 1024), halfClose: false, timeoutMs: 8_000 })));
      let holders: number[] = [];
      await eventually(
        () => {
          holders = pids.filter(pid => openUnder(pid, root).length > 0);
          return holders.length === 2;
        },
        7_000,
        'both ingest processes holding a spool file',
      );
      assert.deepEqual(holders, pids);
      for (const out of await Promise.all(calls)) assert.equal('code' in out && out.code, Status.DEADLINE_EXCEEDED);
    });

    // Large: an output over 16 KiB is split in a thread, and its answer crosses from the coordinator as its encoding.
    for (const [size, text] of [['small', `hit-${mode}`], ['large', `hit-${mode}-${'é'.repeat(12_000)}`]] as const) {
      test(`an answer produced in one process is a cache hit in the other; the plugin ran once (${size})`, async () => {
        const counter = path.join(counterDir, `hit-${mode}-${size}`);
        const tgz = await tarballOf({ 'f.txt': text });
        const first = await generate(tgz, counter);
        assert.deepEqual(first, { value: { manifests: [`{"k":"${text}"}`], sourceType: '' } });
        let before = await counts();
        // The same tarball again, until a process that has not seen it (a memo miss) answers.
        let crossed = false;
        for (let i = 0; i < 6 && !crossed; i++) {
          assert.deepEqual(await generate(tgz, counter), first);
          const now = await counts();
          crossed = now.memoMiss > before.memoMiss;
          // The proxy's log says why when a repeat missed (seen once in CI, never reproduced).
          assert.equal(now.hit - before.hit, 1, `every repeat is a cache hit: ${JSON.stringify({ before, now })}\n${server.stderr().split('\n').slice(-20).join('\n')}`);
          before = now;
        }
        assert.ok(crossed, 'no repeat reached the other ingest process');
        assert.equal(runs(counter), 1);
      });
    }

    test('identical requests in flight in both processes run once', async () => {
      const counter = path.join(counterDir, `coalesce-${mode}`);
      const tgz = await tarballOf({ 'f.txt': `coalesce-${mode}` });
      const before = await counts();
      const outs = await Promise.all([0, 1].map(() => generate(tgz, counter, [{ name: 'SLEEP', value: '1' }])));
      const now = await counts();
      assert.equal(now.memoMiss - before.memoMiss, 2, 'both processes indexed the tarball: they were different processes');
      assert.deepEqual(outs[0], { value: { manifests: [`{"k":"coalesce-${mode}"}`], sourceType: '' } });
      assert.deepEqual(outs[1], outs[0]);
      assert.equal(runs(counter), 1);
      assert.equal(now.coalesced - before.coalesced, 1);
    });

    test('/metrics sums every process: the OK count is the count of OK answers', async () => {
      assert.ok(oks > 0);
      assert.equal((await counts()).ok, oks);
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      assert.match(text, /^cmp_offload_info\{role="proxy",plugin="procs",mode="(standalone|distributed)"\} 1$/m);
    });

    test('a killed ingest process is replaced, the socket keeps answering, and what it held is removed', async () => {
      const [victim, other] = ingestPids(server.proxyPid);
      const root = server.workRoots[0]!;
      // A call held in ingest in each process (spool file open), so that the victim dies holding one.
      const tgz = await tarballOf({ 'f.txt': 'held', 'blob.bin': randomBytes(512 * 1024).toString('base64') });
      const held = [0, 1].map(() => onOwnConnection(server, c => c.generate({ metadata: repoMetadata(tgz), chunks: chunksOf(tgz, 1024), halfClose: false, timeoutMs: 8_000 })));
      await eventually(() => openUnder(victim!, root).length > 0 && openUnder(other!, root).length > 0, 7_000, 'both processes holding a spool file');
      process.kill(victim!, 'SIGKILL');
      await eventually(() => server.stderr().includes('ingest process exited; starting another'), 10_000, 'the coordinator noticing');
      const counter = path.join(counterDir, `after-kill-${mode}`);
      for (let i = 0; i < 4; i++) {
        const t = await tarballOf({ 'f.txt': `after-kill-${i}` });
        assert.deepEqual(await generate(t, counter), { value: { manifests: [`{"k":"after-kill-${i}"}`], sourceType: '' } });
      }
      await eventually(() => ingestPids(server.proxyPid).length === 2, 10_000, 'a replacement');
      const now = ingestPids(server.proxyPid);
      assert.ok(now.includes(other!) && !now.includes(victim!), `ingest processes ${now.join(', ')}`);
      // The victim's call lost its connection; the other one ran into its deadline, as any held call.
      const codes = (await Promise.all(held)).map(out => ('code' in out ? Status[out.code] : 'OK'));
      assert.ok(codes.includes('DEADLINE_EXCEEDED') && !codes.includes('OK'), codes.join(', '));
      await eventually(() => leftovers(server).length === 0, 5_000, `empty work roots (left: ${leftovers(server).join(', ')})`);
    });
  });

  test(`two proxy processes (${mode}): shutdown drains both; the request in flight is answered`, async () => {
    const server = await startCmp(mode, {
      pluginYaml: pluginYaml('drain', GENERATE),
      socketName: 'drain.sock',
      env: { CMP_OFFLOAD_PROXY_PROCESSES: '2', CMP_OFFLOAD_CACHE: 'off', CMP_OFFLOAD_HTTP_ADDR: 'off' },
    });
    let stopped = false;
    try {
      await eventually(() => ingestPids(server.proxyPid).length === 2, 10_000, 'two ingest processes');
      const pids = ingestPids(server.proxyPid);
      const counter = path.join(counterDir, `drain-${mode}`);
      const tgz = await tarballOf({ 'f.txt': 'drained' });
      const call = onOwnConnection(server, c => c.generate({ metadata: repoMetadata(tgz, { env: [{ name: 'COUNTER', value: counter }, { name: 'SLEEP', value: '2' }] }), chunks: chunksOf(tgz, 1024) }));
      let early: unknown;
      void call.then(out => (early = out));
      await eventually(() => runs(counter) === 1 || early !== undefined, 20_000, 'the run to start');
      assert.equal(early, undefined, `the call ended before its run started: ${JSON.stringify(early)}\n${server.stderr()}`);
      stopped = true;
      const code = await server.stop();
      assert.deepEqual(await call, { value: { manifests: ['{"k":"drained"}'], sourceType: '' } });
      assert.equal(code, 0, server.stderr());
      for (const pid of pids) assert.equal(fs.existsSync(`/proc/${pid}`), false, `ingest process ${pid} outlived the proxy`);
    } finally {
      if (!stopped) await server.stop();
    }
  });
}

test('a socket that cannot be served: one line naming the setting, the same with 1 and with 2 processes, exit 1', () => {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-procs-bind-'));
  fs.writeFileSync(path.join(base, 'file'), '');
  try {
    const run = (dir: string, n: string) => {
      const out = spawnSync(process.execPath, [BIN, 'proxy', '--config-dir-path', path.join(REPO_ROOT, 'examples', 'plugin')], {
        env: { ...process.env, ARGOCD_PLUGINSOCKFILEPATH: dir, ARGOCD_CMP_WORKDIR: base, CMP_OFFLOAD_HTTP_ADDR: 'off', CMP_OFFLOAD_PROXY_PROCESSES: n },
        encoding: 'utf8',
        timeout: 30_000,
      });
      assert.equal(out.status, 1, out.stderr);
      // grpc-js's own "No address added" lines are not repeated next to ours.
      assert.doesNotMatch(out.stderr, /No address added/);
      return out.stderr.split('\n').filter(l => l.startsWith('failed to listen on '));
    };
    const missing = path.join(base, 'missing', 'dir');
    const lines = ['1', '2'].map(n => run(missing, n));
    assert.deepEqual(lines[0], [
      `failed to listen on ${missing}/example-plugin-v1.0.sock: no such directory (ARGOCD_PLUGINSOCKFILEPATH=${missing} must be an existing directory the proxy can write)`,
    ]);
    assert.deepEqual(lines[1], lines[0]);
    const file = path.join(base, 'file');
    assert.deepEqual(run(file, '1'), [
      `failed to listen on ${file}/example-plugin-v1.0.sock: not a directory (ARGOCD_PLUGINSOCKFILEPATH=${file} must be an existing directory the proxy can write)`,
    ]);
  } finally {
    fs.rmSync(base, { recursive: true, force: true });
  }
});

test('a Ctrl-C while the ingest processes are still loading (it reaches the whole group): none is started again, exit 0, nothing left', async () => {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-procs-int-'));
  const proxy = spawn(process.execPath, [BIN, 'proxy', '--config-dir-path', path.join(REPO_ROOT, 'examples', 'plugin')], {
    env: { ...process.env, ARGOCD_PLUGINSOCKFILEPATH: base, ARGOCD_CMP_WORKDIR: base, CMP_OFFLOAD_HTTP_ADDR: 'off', CMP_OFFLOAD_PROXY_PROCESSES: '2', ARGOCD_CMP_SERVER_LOGFORMAT: 'text' },
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  try {
    let stderr = '';
    proxy.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const exited = new Promise<number | null>(resolve => proxy.on('exit', code => resolve(code)));
    // Forked is not loaded: a Node process takes far longer to load our modules than this poll.
    await eventually(() => ingestPids(proxy.pid!).length === 2, 10_000, 'two ingest processes forked');
    process.kill(-proxy.pid!, 'SIGINT');
    assert.equal(await exited, 0, stderr);
    const lines = stderr.split('\n');
    const stop = lines.findIndex(l => l.includes('msg="shutting down"'));
    assert.ok(stop >= 0, stderr);
    assert.deepEqual(lines.slice(stop).filter(l => /msg=serving|starting another/.test(l)), [], stderr);
    assert.match(lines.slice(stop).join('\n'), /msg=stopped/);
    assert.throws(() => process.kill(-proxy.pid!, 0), /ESRCH/, 'a process of the proxy\'s group outlived it');
    assert.deepEqual(fs.readdirSync(base), [], 'the socket and the work root are removed');
  } finally {
    try {
      if (proxy.pid) process.kill(-proxy.pid, 'SIGKILL'); // a failed assertion leaves nothing running
    } catch {
      // the group is gone, as it should be
    }
    fs.rmSync(base, { recursive: true, force: true });
  }
});

test('two proxy processes (standalone): CMP_OFFLOAD_CONCURRENCY=1 is one limit: calls received by both processes run one after the other', async () => {
  const port = await freePort();
  const server = await startCmp('standalone', {
    // Each run writes `start`, sleeps, writes `end`: overlapping runs show as two starts in a row.
    pluginYaml: pluginYaml('limit', `generate:\n  command: [sh, -c]\n  args: ["echo start >> $COUNTER; sleep 0.5; echo end >> $COUNTER; echo '{}'"]`),
    socketName: 'limit.sock',
    env: { CMP_OFFLOAD_PROXY_PROCESSES: '2', CMP_OFFLOAD_CONCURRENCY: '1', CMP_OFFLOAD_CACHE: 'off', CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${port}` },
  });
  try {
    await eventually(() => ingestPids(server.proxyPid).length === 2, 10_000, 'two ingest processes');
    await untilMetrics(port);
    // Which process holds a caller's connection: its open sockets, against those it had before.
    const sockets = (pid: number) =>
      fs.readdirSync(`/proc/${pid}/fd`).filter(fd => {
        try {
          return fs.readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:');
        } catch {
          return false; // closed between the listing and the read
        }
      }).length;
    const pids = ingestPids(server.proxyPid);
    const idle = pids.map(sockets);
    const counter = path.join(counterDir, 'limit');
    const tgz = await tarballOf({ 'f.txt': 'limit' });
    const calls = Promise.all(
      // Distinct env: four requests, none coalesced with another; they wait their turn for 0.5-2 s.
      [0, 1, 2, 3].map(i => onOwnConnection(server, c => c.generate({ metadata: repoMetadata(tgz, { env: [{ name: 'COUNTER', value: counter }, { name: 'N', value: String(i) }] }), chunks: chunksOf(tgz, 1024) }))),
    );
    await eventually(() => pids.every((pid, i) => sockets(pid) > idle[i]!), 1_500, 'a caller connection in each ingest process');
    for (const out of await calls) assert.deepEqual(out, { value: { manifests: ['{}'], sourceType: '' } });
    assert.deepEqual(fs.readFileSync(counter, 'utf8').trim().split('\n'), ['start', 'end', 'start', 'end', 'start', 'end', 'start', 'end']);
  } finally {
    await server.stop();
  }
});
