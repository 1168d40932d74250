import { execFile, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { freePort, portFree } from './redis-server.js';
import { stopChild } from './stop-child.js';

const run = promisify(execFile);

/**
 * Throwaway Redis topologies for the Cluster and Sentinel tests: every process is a local
 * `redis-server` on free ports (never the machine's own Redis), in one temp dir; `stop()` kills
 * every process it started (SIGTERM, SIGKILL after 5 s) and removes the dir, whatever state the
 * topology is in.
 */
export interface RedisTopology {
  /** The CMP_OFFLOAD_REDIS_URL that reaches it. */
  url: string;
  /** The data nodes' ports (cluster masters; sentinel: master first, then replica). */
  dataPorts: number[];
  /** What each process printed so far (its log), by name (`master`, `replica`, `sentinel <port>`, `cluster node <port>`). */
  logs(): Record<string, string>;
  stop(): Promise<void>;
}

/** Run `redis-cli` against a local port; its stdout, trimmed. */
export async function redisCli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], { timeout: 30_000 });
  return stdout.trim();
}

/** A free port whose cluster bus port (+10000) is free too. */
async function freeClusterPort(): Promise<number> {
  for (let i = 0; i < 100; i++) {
    const port = await freePort();
    if (port + 10_000 <= 65_535 && (await portFree(port + 10_000))) return port;
  }
  throw new Error('no free port pair for a cluster node');
}

/** Processes of one topology, and their teardown. */
class Processes {
  readonly procs: ChildProcess[] = [];
  readonly output: Record<string, string> = {};
  constructor(readonly dir: string) {}

  /** Start `redis-server args…` and wait for `ready` on its stdout (30 s, generous under load). */
  async start(args: string[], ready: RegExp, name: string): Promise<ChildProcess> {
    const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'], cwd: this.dir });
    this.procs.push(child);
    let out = '';
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${name} did not start: ${out}`)), 30_000);
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        if (ready.test(out)) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', code => {
        clearTimeout(timer);
        reject(new Error(`${name} exited with ${code}: ${out}`));
      });
    });
    // Keep reading, or a full pipe would stall the server; keep the log for a failing test.
    this.output[name] = out;
    child.stdout!.on('data', (d: Buffer) => (this.output[name] += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (this.output[name] += d.toString()));
    return child;
  }

  async stop(): Promise<void> {
    await Promise.all(this.procs.map(child => stopChild(child)));
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

async function until(check: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    if (await check().catch(() => false)) return;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise(r => setTimeout(r, 100));
  }
}

/**
 * The data nodes' arguments: no persistence, no eviction. A master waits
 * repl-diskless-sync-delay (5 s by default) for more replicas before a full sync: 0 starts it at
 * once, so that a replica is in sync in milliseconds rather than after 5 s (at start and after a
 * restart), with no other change to replication.
 */
const DATA_ARGS = ['--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--maxmemory-policy', 'noeviction', '--repl-diskless-sync-delay', '0'];

/**
 * One cluster node on a free port pair. Another test file may take either port between the check
 * and the bind (its own random free port): then the node is started again on another pair.
 */
async function startClusterNode(p: Processes): Promise<number> {
  for (let attempt = 1; ; attempt++) {
    const port = await freeClusterPort();
    const dir = path.join(p.dir, String(port));
    fs.mkdirSync(dir, { recursive: true }); // a port tried before may come back
    try {
      await p.start(
        ['--port', String(port), '--dir', dir, '--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '5000', ...DATA_ARGS],
        /Ready to accept connections/,
        `cluster node ${port}`,
      );
      return port;
    } catch (err) {
      if (attempt >= 5 || !/Address already in use/.test((err as Error).message)) throw err;
    }
  }
}

/**
 * A Redis Cluster of `masters` masters (no replicas; 3 is Redis's minimum), created with
 * `redis-cli --cluster create`, ready when every node reports `cluster_state:ok` and agrees
 * on every slot.
 */
export async function startRedisCluster(masters = 3): Promise<RedisTopology> {
  const p = new Processes(fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-cluster-')));
  try {
    const ports = await Promise.all(Array.from({ length: masters }, () => startClusterNode(p)));
    await run('redis-cli', ['--cluster', 'create', ...ports.map(port => `127.0.0.1:${port}`), '--cluster-replicas', '0', '--cluster-yes'], { timeout: 60_000 });
    for (const port of ports) {
      await until(async () => (await redisCli(port, 'cluster', 'info')).includes('cluster_state:ok'), 30_000, `cluster node ${port} to be ok`);
    }
    // Every node must know every other before a client's slot map is complete.
    for (const port of ports) {
      await until(
        async () => (await redisCli(port, 'cluster', 'nodes')).split('\n').filter(l => l.includes('master') && !l.includes('fail') && /\d+-\d+/.test(l)).length === masters,
        30_000,
        `cluster node ${port} to see ${masters} masters`,
      );
    }
    return {
      url: `redis+cluster://${ports.map(port => `127.0.0.1:${port}`).join(',')}`,
      dataPorts: ports,
      logs: () => ({ ...p.output }),
      stop: () => p.stop(),
    };
  } catch (err) {
    await p.stop();
    throw err;
  }
}

export interface SentinelTopology extends RedisTopology {
  masterName: string;
  sentinelPorts: number[];
  /** The port of the current master, as the sentinels see it. */
  masterPort(): Promise<number>;
  /** `SENTINEL FAILOVER` and wait until every sentinel names the other data node as master, and it accepts writes. */
  failover(): Promise<number>;
}

/**
 * One master, one replica and `sentinels` sentinels (quorum: a majority), ready when the
 * replica is in sync and every sentinel knows the replica and the other sentinels (so that a
 * failover can happen at once).
 *
 * A replica that stopped replicating for a while is still promoted, with these settings, as long
 * as it answers again before the election (the fault matrix's lossy failover stops it ~2 s and
 * resumes it right after the master's kill, 2 s before the sentinels may call the master down):
 * Sentinel skips a replica that is down in its eyes, has not answered a PING for 5 s or INFO for
 * 5 s (INFO every second once the master is down), or whose own link to the master has been down
 * for more than 10 × down-after-milliseconds (20 s; Sentinel has no setting for that factor, the
 * Cluster's `cluster-replica-validity-factor` does not apply) plus the time the master has been
 * down; a stopped replica does not count that time until it runs again. If no replica qualifies,
 * the failover is aborted and tried again only after 2 × failover-timeout (20 s).
 */
export async function startRedisSentinel(sentinels = 3, opts: { password?: string; sentinelPassword?: string } = {}): Promise<SentinelTopology> {
  const masterName = 'cmpmaster';
  const p = new Processes(fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-sentinel-')));
  const auth = opts.password ? ['--requirepass', opts.password, '--masterauth', opts.password] : [];
  const cli = (port: number, ...args: string[]) => redisCli(port, ...(opts.password ? ['--no-auth-warning', '-a', opts.password] : []), ...args);
  const sentinelCli = (port: number, ...args: string[]) =>
    redisCli(port, ...(opts.sentinelPassword ? ['--no-auth-warning', '-a', opts.sentinelPassword] : []), ...args);
  try {
    const master = await freePort();
    const replica = await freePort();
    for (const port of [master, replica]) fs.mkdirSync(path.join(p.dir, String(port)));
    await p.start(['--port', String(master), '--dir', path.join(p.dir, String(master)), ...DATA_ARGS, ...auth], /Ready to accept connections/, 'master');
    await p.start(
      ['--port', String(replica), '--dir', path.join(p.dir, String(replica)), '--replicaof', '127.0.0.1', String(master), ...DATA_ARGS, ...auth],
      /Ready to accept connections/,
      'replica',
    );
    await until(async () => (await cli(replica, 'info', 'replication')).includes('master_link_status:up'), 30_000, 'the replica to sync');
    const sentinelPorts: number[] = [];
    for (let i = 0; i < sentinels; i++) sentinelPorts.push(await freePort());
    const quorum = Math.floor(sentinels / 2) + 1;
    await Promise.all(
      sentinelPorts.map(port => {
        const conf = path.join(p.dir, `sentinel-${port}.conf`);
        fs.writeFileSync(
          conf,
          [
            `port ${port}`,
            'bind 127.0.0.1',
            `dir ${p.dir}`,
            `sentinel monitor ${masterName} 127.0.0.1 ${master} ${quorum}`,
            `sentinel down-after-milliseconds ${masterName} 2000`,
            `sentinel failover-timeout ${masterName} 10000`,
            ...(opts.password ? [`sentinel auth-pass ${masterName} ${opts.password}`] : []),
            ...(opts.sentinelPassword ? [`requirepass ${opts.sentinelPassword}`, `sentinel sentinel-pass ${opts.sentinelPassword}`] : []),
            '',
          ].join('\n'),
        );
        return p.start([conf, '--sentinel'], /Sentinel ID is|\+monitor master/, `sentinel ${port}`);
      }),
    );
    for (const port of sentinelPorts) {
      await until(async () => (await sentinelCli(port, 'sentinel', 'replicas', masterName)).split('\n').includes(String(replica)), 30_000, `sentinel ${port} to know the replica`);
      if (sentinels > 1) {
        await until(
          async () => (await sentinelCli(port, 'sentinel', 'sentinels', masterName)).split('\n').filter(l => l === 'runid').length === sentinels - 1,
          30_000,
          `sentinel ${port} to know the other sentinels`,
        );
      }
    }
    const masterPort = async () => Number((await sentinelCli(sentinelPorts[0]!, 'sentinel', 'get-master-addr-by-name', masterName)).split('\n')[1]);
    return {
      url: `redis+sentinel://${opts.password ? `:${encodeURIComponent(opts.password)}@` : ''}${sentinelPorts.map(port => `127.0.0.1:${port}`).join(',')}/${masterName}`,
      dataPorts: [master, replica],
      masterName,
      sentinelPorts,
      masterPort,
      logs: () => ({ ...p.output }),
      async failover() {
        const before = await masterPort();
        const after = before === master ? replica : master;
        // Sentinel refuses while it has not yet seen the replica's INFO as a good candidate: retry.
        await until(async () => (await sentinelCli(sentinelPorts[0]!, 'sentinel', 'failover', masterName)) === 'OK', 30_000, 'SENTINEL FAILOVER to be accepted');
        for (const port of sentinelPorts) {
          await until(
            async () => (await sentinelCli(port, 'sentinel', 'get-master-addr-by-name', masterName)).split('\n')[1] === String(after),
            30_000,
            `sentinel ${port} to name ${after} as master`,
          );
        }
        await until(async () => (await cli(after, 'info', 'replication')).includes('role:master'), 30_000, `${after} to be master`);
        return after;
      },
      stop: () => p.stop(),
    };
  } catch (err) {
    await p.stop();
    throw err;
  }
}
