/**
 * Fault matrix (issue 14, deliverable 4): for each Redis topology — standalone, Sentinel (1 master,
 * 1 replica, 3 sentinels) and Cluster (3 masters, no replicas), all local processes — and each
 * fault — the master killed mid-load, Redis restarted empty, FLUSHALL mid-load (on every master),
 * workers SIGKILLed every ~2 s, Redis stalled (SIGSTOP/SIGCONT) for longer than the lock
 * duration, and for Sentinel only a lossy failover (the replica stopped for 2 s while the master
 * acknowledges writes, then the master SIGKILLed and the replica, which never got those writes,
 * promoted) — one cell: GenerateManifest calls of the marker plugin through 1 proxy and 3 workers,
 * the fault injected once a third of the calls have started, the load running on until the fault
 * is over and all calls are made.
 *
 * Checks after each cell: every call answered OK, or a failure only for a call that used up its
 * deadline; every answer equals the marker plugin's deterministic output for its tag; each call
 * got exactly one answer (a plugin may run twice after a lost job — docs/reliability.md#failure-behaviour — but
 * no caller sees two answers or another request's); for worker kills, no request completed twice
 * on workers that stayed alive; no plugin process, work dir entry or Redis key without TTL/owner
 * left (on every data node that is up). Figures per cell: calls, answered, p99, the longest call
 * (the longest stall a caller saw), re-submissions (the proxy's cmp_offload_resubmissions_total,
 * which must match its `submitting the request anew` log lines). The lossy failover also checks
 * that writes were lost (a canary key and jobs the old master listed are missing on the new one)
 * and reports the failover time and whether callers waited at most that plus one submission.
 *
 * CMP_FAULT_MATRIX=<topology>/<fault>[,…] runs only those cells (e.g. `sentinel/flushall`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { startDistributed, type Distributed } from '../helpers/distributed.js';
import { openCmpClient, type RpcOutcome } from '../helpers/grpc-client.js';
import { tarballOf } from '../helpers/repo.js';
import { scrape } from '../helpers/metrics.js';
import { freePort } from '../helpers/redis-server.js';
import { stopChild } from '../helpers/stop-child.js';
import { redisCli, startRedisCluster, startRedisSentinel, type RedisTopology, type SentinelTopology } from '../helpers/redis-topology.js';
import type { ManifestResponse } from '../../proto/generated/cmpserver/plugin/plugin.js';
import { checkInvariants } from './lib/invariants.js';
import { auditRedisKeys, jobIds } from './lib/redis-audit.js';
import { expectedManifests, markerCall, markerLines, markerPlugin } from './lib/marker-plugin.js';
import { recordFigures, REDUCED, sandbox } from './lib/settings.js';
import { killWorker, workerWithRunInProgress } from './lib/worker-kill.js';

type Topology = 'standalone' | 'sentinel' | 'cluster';
type Fault = 'master-kill' | 'restart-empty' | 'flushall' | 'worker-kills' | 'redis-stall' | 'lossy-failover';
const TOPOLOGIES: Topology[] = ['standalone', 'sentinel', 'cluster'];
const FAULTS: Fault[] = ['master-kill', 'restart-empty', 'flushall', 'worker-kills', 'redis-stall', 'lossy-failover'];
/** Faults that need a replica to fail over to: only the Sentinel topology has one. */
const SENTINEL_ONLY: Fault[] = ['lossy-failover'];

const CALLS = REDUCED ? 60 : 500;
const CONCURRENCY = REDUCED ? 16 : 40;
const WORKERS = 3;
const DEADLINE_MS = 30_000;
/** A failure is excused only for a call that ran this close to its deadline. */
const DEADLINE_SLACK_MS = 2_000;
const LOCK = '4s';
const STALL_MS = 6_000; // > the 4 s lock, < CMP_OFFLOAD_REDIS_TIMEOUT
const WORKER_KILLS = REDUCED ? 3 : 5;
const WORKER_KILL_EVERY_MS = 2_000;
/**
 * lossy-failover: how long the master acknowledges writes that the stopped replica does not get
 * before it is killed. Far below the 20 s (10 × down-after-milliseconds) after which Sentinel
 * would no longer promote the replica (see SentinelTopology), and long enough for ~16 calls.
 */
const LOST_WINDOW_MS = 2_000;
const BALLAST_CHUNK = 1024 * 1024;
/** The plugin name, hence the BullMQ queue. */
const QUEUE = 'matrix';

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms));
const selected = (process.env.CMP_FAULT_MATRIX ?? '').split(',').map(s => s.trim()).filter(Boolean);

/** Arguments of the data nodes as redis-topology.ts starts them (to start one again, empty). */
const DATA_ARGS = ['--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--maxmemory-policy', 'noeviction', '--repl-diskless-sync-delay', '0'];

async function pidOf(port: number): Promise<number> {
  return Number(/^process_id:(\d+)/m.exec(await redisCli(port, 'info', 'server'))![1]);
}

function refused(port: number): Promise<boolean> {
  return new Promise(resolve => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => { s.destroy(); resolve(false); });
    s.once('error', err => resolve((err as NodeJS.ErrnoException).code === 'ECONNREFUSED'));
  });
}

async function until(check: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    if (await check().catch(() => false)) return;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(100);
  }
}

/** The Redis of one cell and the faults it can suffer. */
interface Bed {
  /** For startDistributed (standalone: its own Redis). */
  url?: string;
  attach(d: Distributed): void;
  /** The data nodes that hold our keys now (for FLUSHALL and the key audit). */
  masters(): Promise<number[]>;
  killMaster(): Promise<string>;
  restartEmpty(): Promise<string>;
  flushAll(): Promise<string>;
  stall(ms: number): Promise<string>;
  /** Only with a replica (Sentinel): a failover that loses writes the old master acknowledged. */
  lossyFailover?(windowMs: number): Promise<LossyFailover>;
  /** The Redis processes' logs by name, for a failing cell (Sentinel and Cluster). */
  logs?(): Record<string, string>;
  stop(): Promise<void>;
}

/** What a lossy failover did, as measured by the bed. */
interface LossyFailover {
  note: string;
  /** When the master was SIGKILLed. */
  killedAt: number;
  /** From the kill until the first sentinel, and until every sentinel, names the promoted replica (which then says role:master). */
  failoverFirstMs: number;
  failoverMs: number;
  /** From the replica's SIGSTOP to the master's SIGKILL. */
  stoppedMs: number;
  ballastBytes: number;
  /** Jobs the old master listed just before the kill, and how many of them the promoted replica has not. */
  jobsBefore: number;
  jobsLost: number;
  /** Whether a key written on the old master just before the kill is absent on the new one. */
  canaryLost: boolean;
}

/** Data nodes this suite started again itself (the topology's stop() does not know them). */
class Respawned {
  readonly procs: ChildProcess[] = [];
  async start(args: string[]): Promise<void> {
    const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.procs.push(child);
    let out = '';
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`redis-server did not start again: ${out}`)), 30_000);
      child.stdout!.on('data', (b: Buffer) => {
        out += b.toString();
        if (out.includes('Ready to accept connections')) { clearTimeout(timer); resolve(); }
      });
      child.once('exit', code => { clearTimeout(timer); reject(new Error(`redis-server exited with ${code}: ${out}`)); });
    });
    child.stderr!.resume();
  }
  async stop(): Promise<void> {
    await Promise.all(this.procs.map(child => stopChild(child)));
  }
}

/** SIGSTOP a process for `ms`, SIGCONT it whatever happens. */
async function stallPid(pid: number, ms: number): Promise<void> {
  process.kill(pid, 'SIGSTOP');
  try {
    await sleep(ms);
  } finally {
    process.kill(pid, 'SIGCONT');
  }
}

/** SIGKILL the node on `port`, wait until the port is free, start it again empty with `args`. */
async function killAndRespawn(respawned: Respawned, port: number, args: string[], signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
  const pid = await pidOf(port);
  process.kill(pid, signal);
  await until(() => refused(port), 15_000, `node ${port} to exit`);
  await respawned.start(args);
}

async function standaloneBed(): Promise<Bed> {
  let d!: Distributed;
  const killed = async () => until(() => refused(d.redis.port), 15_000, 'Redis to exit');
  return {
    attach: x => (d = x),
    masters: async () => [d.redis.port],
    async killMaster() {
      d.redis.signal('SIGKILL');
      await killed();
      await d.redis.restart();
      return 'SIGKILL, restarted at once without persistence';
    },
    async restartEmpty() {
      await d.redis.pause();
      await d.redis.restart();
      return 'SIGTERM, restarted at once without persistence';
    },
    async flushAll() {
      await redisCli(d.redis.port, 'flushall');
      return 'FLUSHALL';
    },
    async stall(ms) {
      d.redis.signal('SIGSTOP');
      try {
        await sleep(ms);
      } finally {
        d.redis.signal('SIGCONT');
      }
      return `SIGSTOP for ${ms} ms`;
    },
    stop: async () => {},
  };
}

async function sentinelBed(): Promise<Bed> {
  const topo: SentinelTopology = await startRedisSentinel(3);
  const respawned = new Respawned();
  const dirOf = async (port: number) => (await redisCli(port, 'config', 'get', 'dir')).split('\n')[1]!;
  return {
    url: topo.url,
    attach: () => {},
    masters: async () => [await topo.masterPort()],
    async killMaster() {
      const old = await topo.masterPort();
      process.kill(await pidOf(old), 'SIGKILL');
      const t0 = Date.now();
      await until(async () => (await topo.masterPort()) !== old, 60_000, 'the sentinels to promote the replica');
      const promoted = await topo.masterPort();
      await until(async () => (await redisCli(promoted, 'info', 'replication')).includes('role:master'), 30_000, 'the replica to be master');
      return `master ${old} SIGKILLed (stays down); ${promoted} master after ${Date.now() - t0} ms`;
    },
    async restartEmpty() {
      const port = await topo.masterPort();
      const dir = await dirOf(port);
      await killAndRespawn(respawned, port, ['--port', String(port), '--dir', dir, ...DATA_ARGS], 'SIGTERM');
      return `master ${port} SIGTERMed, restarted at once empty (now master: ${await topo.masterPort()})`;
    },
    async flushAll() {
      const port = await topo.masterPort();
      await redisCli(port, 'flushall');
      return `FLUSHALL on master ${port}`;
    },
    async stall(ms) {
      const port = await topo.masterPort();
      await stallPid(await pidOf(port), ms);
      return `master ${port} SIGSTOPped for ${ms} ms (now master: ${await topo.masterPort()})`;
    },
    async lossyFailover(windowMs) {
      const old = await topo.masterPort();
      const replica = topo.dataPorts.find(p => p !== old)!;
      const [masterPid, replicaPid] = [await pidOf(old), await pidOf(replica)];
      const master = new Redis(`redis://127.0.0.1:${old}`, { maxRetriesPerRequest: 1 });
      master.on('error', () => {});
      const stoppedAt = Date.now();
      let killedAt = 0;
      let ballastBytes = 0;
      let jobsBefore: Set<string>;
      process.kill(replicaPid, 'SIGSTOP');
      try {
        // What the master sends the stopped replica fills the two sockets' kernel buffers first,
        // and that part still reaches the replica when it runs again (a killed process's socket
        // delivers its send buffer). Only what the master itself still holds (the replica's
        // output buffer, `omem`) dies with it: fill the kernel buffers with ballast (with a TTL)
        // until the master holds 1 MiB, so that every write after it is lost.
        const omem = async () => Number(/omem=(\d+)/.exec(String(await master.call('client', 'list', 'type', 'replica')))?.[1] ?? 0);
        const chunk = Buffer.alloc(BALLAST_CHUNK, 'b');
        while ((await omem()) < BALLAST_CHUNK && ballastBytes < 64 * BALLAST_CHUNK) {
          await master.set(`matrix-ballast:${ballastBytes / BALLAST_CHUNK}`, chunk, 'PX', 600_000);
          ballastBytes += BALLAST_CHUNK;
        }
        await sleep(Math.max(0, windowMs - (Date.now() - stoppedAt)));
        jobsBefore = await jobIds(`redis://127.0.0.1:${old}`, QUEUE);
        await master.set('matrix-canary', String(Date.now()), 'PX', 600_000);
        master.disconnect();
        process.kill(masterPid, 'SIGKILL');
        killedAt = Date.now();
        // Gone for good (its sockets closed) before the replica may read again.
        await until(() => refused(old), 15_000, `master ${old} to exit`);
      } finally {
        process.kill(replicaPid, 'SIGCONT');
        master.disconnect();
      }
      let failoverFirstMs = 0;
      const sentinels = topo.sentinelPorts.map(port => new Redis(`redis://127.0.0.1:${port}`, { maxRetriesPerRequest: 1 }));
      try {
        await until(async () => {
          const named = await Promise.all(sentinels.map(async s => Number(((await s.call('sentinel', 'get-master-addr-by-name', topo.masterName)) as string[])[1])));
          if (!failoverFirstMs && named.includes(replica)) failoverFirstMs = Date.now() - killedAt;
          return named.every(p => p === replica) && (await redisCli(replica, 'info', 'replication')).includes('role:master');
        }, 60_000, 'every sentinel to name the replica as master');
      } finally {
        for (const s of sentinels) s.disconnect();
      }
      const failoverMs = Date.now() - killedAt;
      const jobsAfter = await jobIds(`redis://127.0.0.1:${replica}`, QUEUE);
      const jobsLost = [...jobsBefore].filter(id => !jobsAfter.has(id)).length;
      const canaryLost = (await redisCli(replica, 'exists', 'matrix-canary')) === '0';
      return {
        note: `replica ${replica} SIGSTOPped, ${ballastBytes / BALLAST_CHUNK} MiB of ballast, master ${old} SIGKILLed ${killedAt - stoppedAt} ms later (stays down), replica SIGCONTed; ${replica} master after ${failoverMs} ms; ${jobsLost} of the ${jobsBefore.size} jobs the old master listed lost, canary ${canaryLost ? 'lost' : 'kept'}`,
        killedAt,
        failoverFirstMs,
        failoverMs,
        stoppedMs: killedAt - stoppedAt,
        ballastBytes,
        jobsBefore: jobsBefore.size,
        jobsLost,
        canaryLost,
      };
    },
    logs: () => topo.logs(),
    async stop() {
      await respawned.stop();
      await topo.stop();
    },
  };
}

async function clusterBed(): Promise<Bed> {
  const topo: RedisTopology = await startRedisCluster(3);
  const respawned = new Respawned();
  /** The master that holds the slot of our hash tag. */
  const ours = async () => {
    const slot = Number(await redisCli(topo.dataPorts[0]!, 'cluster', 'keyslot', '{cmp-offload}'));
    for (const line of (await redisCli(topo.dataPorts[0]!, 'cluster', 'nodes')).split('\n')) {
      const f = line.split(' ');
      if (!f[2]!.includes('master')) continue;
      for (const range of f.slice(8)) {
        const [a, b] = range.split('-').map(Number);
        if (slot >= a! && slot <= (b ?? a)!) return Number(/:(\d+)@/.exec(f[1]!)![1]);
      }
    }
    throw new Error(`no master holds slot ${slot}`);
  };
  const argsOf = async (port: number) => {
    const dir = (await redisCli(port, 'config', 'get', 'dir')).split('\n')[1]!;
    return ['--port', String(port), '--dir', dir, '--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '5000', ...DATA_ARGS];
  };
  const clusterOk = (port: number) => until(async () => (await redisCli(port, 'cluster', 'info')).includes('cluster_state:ok'), 30_000, `cluster node ${port} ok`);
  const restart = async (signal: NodeJS.Signals) => {
    const port = await ours();
    const t0 = Date.now();
    await killAndRespawn(respawned, port, await argsOf(port), signal);
    for (const p of topo.dataPorts) await clusterOk(p);
    return `master ${port} (our slot; no replica, so no failover) ${signal}ed and started again empty with its nodes.conf; cluster ok after ${Date.now() - t0} ms`;
  };
  return {
    url: topo.url,
    attach: () => {},
    masters: async () => topo.dataPorts,
    killMaster: () => restart('SIGKILL'),
    restartEmpty: () => restart('SIGTERM'),
    async flushAll() {
      await Promise.all(topo.dataPorts.map(p => redisCli(p, 'flushall')));
      return `FLUSHALL on every master (${topo.dataPorts.join(', ')})`;
    },
    async stall(ms) {
      const port = await ours();
      await stallPid(await pidOf(port), ms);
      return `master ${port} (our slot) SIGSTOPped for ${ms} ms`;
    },
    logs: () => topo.logs(),
    async stop() {
      await respawned.stop();
      await topo.stop();
    },
  };
}

interface Call { tag: string; start: number; ms: number; outcome: RpcOutcome<ManifestResponse> }

for (const topology of TOPOLOGIES) {
  for (const fault of FAULTS) {
    if (SENTINEL_ONLY.includes(fault) && topology !== 'sentinel') continue;
    const cell = `${topology}/${fault}`;
    const skip = selected.length > 0 && !selected.includes(cell);
    test(`fault matrix ${cell}: ${CALLS} calls, ${CONCURRENCY} at a time; every call answered and right, no leftovers`, { skip, timeout: 600_000 }, async () => {
      await runCell(topology, fault);
    });
  }
}

async function runCell(topology: Topology, fault: Fault): Promise<void> {
  const cell = `${topology}/${fault}`;
  const cellStart = Date.now();
  const box = sandbox(`matrix-${topology}-${fault}`);
  const markers = pluginWritableTempDir('cmp-rel-markers-');
  const bed = topology === 'standalone' ? await standaloneBed() : topology === 'sentinel' ? await sentinelBed() : await clusterBed();
  const proxyPort = await freePort();
  let d: Distributed | undefined;
  let client: ReturnType<typeof openCmpClient> | undefined;
  try {
    d = await startDistributed({
      pluginYaml: markerPlugin(QUEUE, markers),
      socketName: `${QUEUE}.sock`,
      workers: WORKERS,
      redisUrl: bed.url,
      // Locks of 4 s as in the load suite (2 loaded cores); the calls in flight wait up to 10 s for
      // Redis to come back (docs/reliability.md#failure-behaviour), longer than the stall and a Sentinel failover.
      env: { TMPDIR: box.tmp, CMP_OFFLOAD_LOCK_DURATION: LOCK, CMP_OFFLOAD_STALLED_INTERVAL: '2s', CMP_OFFLOAD_REDIS_TIMEOUT: '10s' },
      proxyEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${proxyPort}` },
      workerEnv: { CMP_OFFLOAD_HTTP_ADDR: 'off' },
    });
    bed.attach(d);
    const allWorkers = [...d.workers];
    const dd = d;
    client = openCmpClient(d.proxy.socketPath);
    const c = client;
    const tgz = await tarballOf({ 'app/values.yaml': 'replicas: 1\n', 'README.md': 'matrix\n' });
    for (let i = 0; i < 5; i++) assert.deepEqual(await c.generate(markerCall(tgz, box.token, `warm-${i}`)), { value: { manifests: expectedManifests(`warm-${i}`), sourceType: '' } });
    const resubmitsBefore = await resubmissions(proxyPort);
    const resubmitLogsBefore = resubmissionLogLines(d.proxy.stderr());

    const gate = Math.round(CALLS / 3);
    let next = 0;
    let faultOver = false;
    let faultStart = 0;
    let faultMs = 0;
    let faultNote = '';
    let lossy: LossyFailover | undefined;
    const calls: Call[] = [];
    const killed = new Set<string>();
    const cut = new Set<string>();
    let killsMidRun = 0;

    const injector = (async () => {
      while (next < gate) await sleep(25);
      faultStart = Date.now();
      try {
        switch (fault) {
          case 'master-kill': faultNote = await bed.killMaster(); break;
          case 'restart-empty': faultNote = await bed.restartEmpty(); break;
          case 'flushall': faultNote = await bed.flushAll(); break;
          case 'redis-stall': faultNote = await bed.stall(STALL_MS); break;
          case 'lossy-failover': lossy = await bed.lossyFailover!(LOST_WINDOW_MS); faultNote = lossy.note; break;
          case 'worker-kills': {
            for (let k = 0; k < WORKER_KILLS; k++) {
              if (k > 0) await sleep(WORKER_KILL_EVERY_MS);
              // A worker with a plugin run in progress whose job no kill cut before (as the load suite).
              if (await killWorker(dd, workerWithRunInProgress(markers, dd.workers, cut), killed)) killsMidRun++;
              allWorkers.push(await dd.addWorker());
            }
            faultNote = `${WORKER_KILLS} workers SIGKILLed ${WORKER_KILL_EVERY_MS} ms apart, ${killsMidRun} of them mid-run`;
            break;
          }
        }
      } finally {
        faultMs = Date.now() - faultStart;
        faultOver = true;
      }
    })();

    const lane = async () => {
      while (next < CALLS || !faultOver) {
        const i = next++;
        const tag = `t${i}`;
        const start = Date.now();
        const outcome = await c.generate(markerCall(tgz, box.token, tag, { SLEEP: i % 10 === 0 ? '0.5' : '0' }, DEADLINE_MS));
        calls.push({ tag, start, ms: Date.now() - start, outcome });
        // A lane whose call failed pauses 250 ms (the redis-restart suite: 50 ms), or fast failures during an
        // outage would use up the cell's calls in a tight loop (and count in the hundreds).
        if ('code' in outcome) await sleep(250);
      }
    };
    const loadStart = Date.now();
    const lanes = Promise.all(Array.from({ length: CONCURRENCY }, lane));
    const injected = await injector.then(() => undefined, (err: unknown) => err);
    await lanes;
    const loadEnd = Date.now();

    // Figures and checks.
    const findings: string[] = [];
    if (injected) findings.push(`fault injection failed: ${String(injected)}`);
    const ok = calls.filter(r => 'value' in r.outcome);
    const wrong = ok.filter(r => JSON.stringify(r.outcome) !== JSON.stringify({ value: { manifests: expectedManifests(r.tag), sourceType: '' } }));
    const failed = calls.filter(r => 'code' in r.outcome);
    const excused = failed.filter(r => r.ms >= DEADLINE_MS - DEADLINE_SLACK_MS);
    const unexcused = failed.filter(r => r.ms < DEADLINE_MS - DEADLINE_SLACK_MS);
    const answersPerTag = new Map<string, number>();
    for (const r of calls) answersPerTag.set(r.tag, (answersPerTag.get(r.tag) ?? 0) + 1);
    const doubleAnswers = [...answersPerTag].filter(([, n]) => n !== 1).map(([t]) => t);
    const ends = new Map<string, string[]>();
    for (const [dir, tag] of markerLines(markers, 'ends')) if (tag.startsWith('t')) ends.set(tag, [...(ends.get(tag) ?? []), dir]);
    const doubleRuns = [...ends].filter(([, dirs]) => dirs.length > 1);
    const doublesOnSurvivors = doubleRuns.filter(([, dirs]) => dirs.filter(dir => !killed.has(dir)).length > 1).map(([t, dirs]) => `${t}: ${dirs.join(', ')}`);
    const okNeverRan = ok.filter(r => !ends.has(r.tag)).map(r => r.tag);
    const lat = calls.map(r => r.ms).sort((a, b) => a - b);
    const resubmitsAfter = await resubmissions(proxyPort);
    const resubmitted: Record<string, number> = {};
    for (const [cause, n] of resubmitsAfter) if (n - (resubmitsBefore.get(cause) ?? 0) > 0) resubmitted[cause] = n - (resubmitsBefore.get(cause) ?? 0);
    const resubmitTotal = Object.values(resubmitted).reduce((a, b) => a + b, 0);
    const resubmitLogs = resubmissionLogLines(d.proxy.stderr()) - resubmitLogsBefore;

    if (wrong.length) findings.push(`wrong answers: ${wrong.slice(0, 5).map(r => `${r.tag} ${JSON.stringify(r.outcome)}`).join('; ')}`);
    if (unexcused.length) findings.push(`${unexcused.length} calls failed before their deadline: ${unexcused.slice(0, 5).map(r => `${r.tag} after ${r.ms} ms (${r.start - faultStart} ms from fault start) ${JSON.stringify(r.outcome)}`).join('; ')}`);
    if (doubleAnswers.length) findings.push(`calls answered other than once: ${doubleAnswers.slice(0, 5).join(', ')}`);
    if (okNeverRan.length) findings.push(`OK answers for requests whose plugin never finished: ${okNeverRan.slice(0, 5).join(', ')}`);
    if (fault === 'worker-kills' && doublesOnSurvivors.length) findings.push(`requests completed twice on workers that stayed alive: ${doublesOnSurvivors.slice(0, 5).join('; ')}`);
    if (resubmitLogs !== resubmitTotal) findings.push(`${resubmitTotal} re-submissions counted, ${resubmitLogs} logged`);
    const lossyFigures: Record<string, number | string> = {};
    if (lossy) {
      const { killedAt, failoverMs } = lossy;
      // The scenario is what it claims only if the promoted replica lacks writes the old master acknowledged.
      if (!lossy.canaryLost || lossy.jobsLost === 0) findings.push(`the failover lost no acknowledged write (canary ${lossy.canaryLost ? 'lost' : 'kept'}, ${lossy.jobsLost} jobs lost): the scenario did not happen`);
      // A failover of seconds leaves every deadline (30 s) within reach: a call that ran out of it was lost.
      if (excused.length) findings.push(`${excused.length} calls ran out of their deadline although the failover took ${failoverMs} ms: ${excused.slice(0, 5).map(r => `${r.tag} (started ${r.start - killedAt} ms from the kill)`).join(', ')}`);
      // One submission under this load: the longest call that ended before the fault. A caller in flight
      // at the kill, or starting during the failover, should wait at most the failover and one submission more.
      const oneSubmissionMs = Math.max(0, ...calls.filter(r => r.start + r.ms <= faultStart).map(r => r.ms));
      const hit = calls.filter(r => r.start + r.ms > killedAt && r.start < killedAt + failoverMs);
      const longestAfterKillMs = Math.max(0, ...hit.map(r => r.start + r.ms - Math.max(r.start, killedAt)));
      const targetMs = failoverMs + oneSubmissionMs;
      Object.assign(lossyFigures, {
        stoppedMs: lossy.stoppedMs,
        ballastMiB: lossy.ballastBytes / BALLAST_CHUNK,
        jobsBeforeKill: lossy.jobsBefore,
        jobsLost: lossy.jobsLost,
        canaryLost: lossy.canaryLost ? 'yes' : 'no',
        failoverFirstMs: lossy.failoverFirstMs,
        failoverMs,
        callsHitByFailover: hit.length,
        longestAfterKillMs,
        longestAfterFailoverMs: Math.max(0, longestAfterKillMs - failoverMs),
        oneSubmissionMs,
        targetMs,
        withinTarget: longestAfterKillMs <= targetMs ? 'yes' : 'no',
      });
    }

    // Leftovers: plugin processes, work dirs, temp dirs; keys on every data node that is up.
    let leftovers = 'none';
    try {
      await checkInvariants({
        token: box.token,
        emptyDirs: [box.tmp, d.proxy.workRoot, ...d.workers.map(w => path.join(w.base, 'work', '_cmp_server'))],
      });
    } catch (err) {
      leftovers = (err as Error).message;
      findings.push(`leftovers: ${leftovers}`);
    }
    let keys = 0;
    let keysWithTtl = 0;
    const owned: Record<string, number> = {};
    for (const port of await bed.masters()) {
      try {
        const a = await auditRedisKeys(`redis://127.0.0.1:${port}`);
        keys += a.keys;
        keysWithTtl += a.withTtl;
        for (const [k, n] of Object.entries(a.owned)) owned[k] = (owned[k] ?? 0) + n;
        if (a.orphans.length) findings.push(`Redis ${port}: ${a.orphans.length} keys without TTL or owner: ${a.orphans.slice(0, 5).join(', ')}`);
      } catch (err) {
        findings.push(`Redis ${port}: key audit failed: ${(err as Error).message}`);
      }
    }

    recordFigures(`fault-matrix ${cell}`, {
      calls: calls.length,
      answeredOk: ok.length,
      failed: failed.length,
      failedAtDeadline: excused.length,
      wrong: wrong.length,
      p50Ms: lat[Math.floor(lat.length / 2)] ?? 0,
      p99Ms: lat[Math.floor(lat.length * 0.99)] ?? 0,
      longestCallMs: lat[lat.length - 1] ?? 0,
      resubmissions: resubmitTotal,
      resubmissionsByCause: Object.entries(resubmitted).map(([k, v]) => `${k}=${v}`).join(' ') || 'none',
      resubmissionLogLines: resubmitLogs,
      failuresByKind: failureKinds(failed.map(r => r.outcome)),
      pluginDoubleRuns: doubleRuns.length,
      fault: faultNote,
      faultMs,
      loadMs: loadEnd - loadStart,
      redisKeys: keys,
      keysWithTtl,
      ownedKeys: Object.entries(owned).map(([k, v]) => `${k}=${v}`).join(' ') || 'none',
      cellMs: Date.now() - cellStart,
      ...lossyFigures,
      findings: findings.length,
    });
    for (const f of findings) process.stdout.write(`# FINDING ${cell}: ${f}\n`);
    // CMP_FAULT_MATRIX_LOGS=<dir>: keep the services' logs of a failing cell for diagnosis.
    const logs = process.env.CMP_FAULT_MATRIX_LOGS;
    if (logs && findings.length) {
      const dir = path.join(logs, cell.replace('/', '-'));
      fs.mkdirSync(dir, { recursive: true });
      fs.writeFileSync(path.join(dir, 'proxy.log'), d.proxy.stderr());
      allWorkers.forEach((w, i) => fs.writeFileSync(path.join(dir, `worker-${i}.log`), w.stderr()));
      for (const [name, text] of Object.entries(bed.logs?.() ?? {})) fs.writeFileSync(path.join(dir, `redis-${name.replace(/ /g, '-')}.log`), text);
      fs.writeFileSync(path.join(dir, 'findings.txt'), findings.join('\n') + '\n');
    }
    assert.deepEqual(findings, [], `${cell}: invariants`);
  } finally {
    client?.close();
    await d?.stop();
    await bed.stop();
    box.remove();
    fs.rmSync(markers, { recursive: true, force: true });
  }
}

/** The proxy's cmp_offload_resubmissions_total by cause. */
async function resubmissions(port: number): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const [k, v] of await scrape(port)) {
    const m = /^cmp_offload_resubmissions_total\{cause="([^"]+)"\}$/.exec(k);
    if (m) out.set(m[1]!, v);
  }
  return out;
}

/** The proxy's `submitting the request anew` log lines (one per re-submission). */
function resubmissionLogLines(stderr: string): number {
  return stderr.split('\n').filter(l => l.includes('submitting the request anew')).length;
}

/** Failed calls counted by status and message with ids, addresses and numbers blanked. */
function failureKinds(outcomes: RpcOutcome<ManifestResponse>[]): string {
  const kinds = new Map<string, number>();
  for (const o of outcomes) {
    if (!('code' in o)) continue;
    const text = o.details
      .replace(/redis(\+\w+)?:\/\/\S+/g, '<url>')
      .replace(/\b[0-9a-f]{16,}\b/g, '<id>')
      .replace(/\d+(\.\d+)*/g, 'N')
      .slice(0, 160);
    const k = `${o.code} ${text}`;
    kinds.set(k, (kinds.get(k) ?? 0) + 1);
  }
  return [...kinds].map(([k, n]) => `${n}x ${k}`).join(' | ') || 'none';
}
