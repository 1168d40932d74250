import fs from 'node:fs';
import path from 'node:path';
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { hostPid } from '../helpers/runner-process.js';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import type { EnvEntry } from '../../proto/generated/cmpserver/plugin/plugin.js';
import { startDistributed, type Distributed, type DistributedOptions } from '../helpers/distributed.js';
import { chunksOf, openCmpClient, repoMetadata, type CmpTestClient, type StreamCall } from '../helpers/grpc-client.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { tarballOf } from '../helpers/repo.js';
import type { WorkerProcess } from '../helpers/worker-process.js';

/**
 * A plugin that leaves markers: `starts` gets "<worker work dir> <tag>" when a run begins,
 * `pids` gets "<pid> <tag>" (the command's pid, the leader of its process group), `ends` gets
 * "<tag>" when it finishes. SLEEP (request env) makes it slow; WAIT=<name> makes it wait until
 * the file `<markers>/<name>` exists (a run held until the test lets it go); FAIL makes it fail;
 * BIG=<file> adds a ConfigMap `big` holding that file of the repo (a result too large to come
 * back inside the job's return value: it is stored under its key).
 */
export function markerPlugin(name: string): string {
  return pluginYaml(name, `generate:
  command: [sh, -c]
  args:
    - |
      echo "$ARGOCD_CMP_WORKDIR $ARGOCD_ENV_TAG" >> "$MARKERS/starts"
      echo "$$ $(readlink /proc/self/ns/pid) $ARGOCD_ENV_TAG" >> "$MARKERS/pids"
      if [ -n "$ARGOCD_ENV_WAIT" ]; then while [ ! -e "$MARKERS/$ARGOCD_ENV_WAIT" ]; do sleep 0.05; done; fi
      sleep "\${ARGOCD_ENV_SLEEP:-0}"
      if [ -n "$ARGOCD_ENV_FAIL" ]; then echo "it broke: $ARGOCD_ENV_FAIL" >&2; exit 3; fi
      echo "$ARGOCD_ENV_TAG" >> "$MARKERS/ends"
      printf 'kind: ConfigMap\\nmetadata:\\n  name: %s\\ndata:\\n  on: 1.50\\n' "$ARGOCD_ENV_TAG"
      if [ -n "$ARGOCD_ENV_BIG" ]; then printf -- '---\\nkind: ConfigMap\\nmetadata:\\n  name: big\\ndata:\\n  pad: %s\\n' "$(cat "$ARGOCD_ENV_BIG")"; fi`);
}

/** Lines of a marker file (none when it does not exist). */
export function lines(file: string): string[] {
  return fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n').filter(Boolean) : [];
}

/** Runs started for a tag, with the work dir of the process that ran each. */
export function startsOf(markers: string, tag: string): string[] {
  return lines(path.join(markers, 'starts'))
    .filter(l => l.endsWith(` ${tag}`))
    .map(l => l.slice(0, -tag.length - 1));
}

/**
 * Host pids of the runs started for a tag (each the leader of its run's process group), as long
 * as they run (an isolated runner's run writes its pid in its own PID namespace); -1 for a run
 * that is gone.
 */
export function pidsOf(markers: string, tag: string): number[] {
  return lines(path.join(markers, 'pids'))
    .filter(l => l.endsWith(` ${tag}`))
    .map(l => {
      const [pid, ns] = l.slice(0, -tag.length - 1).split(' ');
      return hostPid(Number(pid), ns!) ?? -1;
    });
}

/** Whether process group `pgid` still has a member (signal 0 to the group). */
export function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw err;
  }
}

export function endsOf(markers: string, tag: string): number {
  return lines(path.join(markers, 'ends')).filter(l => l === tag).length;
}

/** A GenerateManifest call for the marker plugin. */
export function generateCall(
  tgz: Buffer,
  env: Record<string, string>,
  opts: { appName?: string; timeoutMs?: number } = {},
): StreamCall {
  const entries: EnvEntry[] = [{ name: 'ARGOCD_APP_NAME', value: opts.appName ?? 'app' }];
  for (const [k, v] of Object.entries(env)) entries.push({ name: `ARGOCD_ENV_${k}`, value: v });
  return {
    metadata: repoMetadata(tgz, { appName: opts.appName, env: entries }),
    chunks: chunksOf(tgz, 1024),
    timeoutMs: opts.timeoutMs,
  };
}

export const sleep = (ms: number) => new Promise(r => setTimeout(r, ms));

/**
 * Wait for a process's `"http listening"` log line: the ops server starts in the background, after
 * the socket, and loading fastify on a loaded machine took more than 10 s once (a clean-clone run,
 * three suites at once on two cores). A timeout shows the process's stderr (a port taken, a crash).
 */
export async function untilHttpListening(proc: { stderr(): string }, what: string, ms = 30_000): Promise<void> {
  await until(() => proc.stderr().includes('"http listening"'), ms, what).catch((e: unknown) => {
    throw new Error(`${(e as Error).message}\n${proc.stderr().slice(-2000)}`);
  });
}

/** Poll until `check` gives something truthy (returned) or fail after `ms`. */
export async function until<T>(check: () => T | Promise<T>, ms: number, what: string): Promise<NonNullable<T>> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v as NonNullable<T>;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(25);
  }
}

/**
 * The code and text a worker stored as a job's failedReason (its signed failure; the signature
 * is not checked here), or undefined when the reason is not one.
 */
export function failureOf(reason: string): { code: number; message: string; canceled: boolean } | undefined {
  const m = /^cmp-offload\/failure\/v2:[0-9a-f]{64}:(.*)$/s.exec(reason);
  if (!m) return undefined;
  const [code, message, canceled] = JSON.parse(m[1]!) as [number, string, boolean];
  return { code, message, canceled };
}

export const PREFIX = '{cmp-offload}';

/** Distributed mode for the marker plugin, with what the tests look at it through. */
export interface MarkerBed {
  d: Distributed;
  /** A CMP client on the proxy's socket. */
  client: CmpTestClient;
  /** A plain Redis client, for looking at and tampering with keys. */
  redis: Redis;
  /** The plugin's BullMQ queue, on its own connection. */
  queue: Queue;
  /** Close the clients, then stop the processes and Redis. */
  stop(): Promise<void>;
}

/**
 * `startDistributed` for `markerPlugin(plugin)` on `<plugin>.sock` (unless `opts` says
 * otherwise), plus a CMP client, a plain Redis client and the plugin's queue: the setup the
 * distributed tests open in their `before` hook and close with `stop()` in `after`.
 */
export async function startMarkerBed(
  plugin: string,
  opts: Omit<DistributedOptions, 'pluginYaml' | 'socketName'> & Partial<Pick<DistributedOptions, 'pluginYaml' | 'socketName'>> = {},
): Promise<MarkerBed> {
  const d = await startDistributed({ pluginYaml: markerPlugin(plugin), socketName: `${plugin}.sock`, ...opts });
  const client = openCmpClient(d.proxy.socketPath);
  // The URL the processes got (with the password, when Redis has one).
  const url = d.env.CMP_OFFLOAD_REDIS_URL!;
  const redis = new Redis(url);
  const queueConnection = new Redis(url, { maxRetriesPerRequest: null });
  const queue = new Queue(plugin, { connection: queueConnection, prefix: PREFIX });
  return {
    d,
    client,
    redis,
    queue,
    async stop() {
      client.close();
      await queue.close();
      queueConnection.disconnect();
      redis.disconnect();
      await d.stop();
    },
  };
}

/** What a GenerateManifest call through the CMP test client ends with. */
export type Outcome = Awaited<ReturnType<CmpTestClient['generate']>>;

/** The ConfigMap names of a GenerateManifest answer (the marker plugin names its ConfigMap after TAG). */
export function names(o: Outcome): string[] {
  assert.ok('value' in o, JSON.stringify(o));
  return o.value.manifests.map(m => (JSON.parse(m) as { metadata: { name: string } }).metadata.name);
}

/** Let the marker plugin's runs waiting on WAIT=`name` go on. */
export function release(markers: string, name: string): void {
  fs.writeFileSync(path.join(markers, name), '');
}

/**
 * Env for marker-plugin processes that run every call as its own job (no cache, no coalescing),
 * one run at a time per worker.
 */
export function oneRunAtATimeEnv(markers: string): Record<string, string> {
  return { MARKERS: markers, CMP_OFFLOAD_CACHE: 'off', CMP_OFFLOAD_CONCURRENCY: '1' };
}

/** The work dir plugin commands see on worker `w` (what the marker plugin's `starts` lines name). */
export const workDirOf = (w: WorkerProcess): string => path.join(w.base, 'work');

/** Start `n` more workers of `d`, each with `env` on top of its settings. */
export function addWorkers(d: Distributed, n: number, env?: Record<string, string>): Promise<WorkerProcess[]> {
  return Promise.all(Array.from({ length: n }, () => d.addWorker(env)));
}

/** Stop `workers` (SIGTERM), taking those still listed out of `d.workers` first. */
export async function retireWorkers(d: Distributed, workers: WorkerProcess[]): Promise<void> {
  for (const w of workers) if (d.workers.includes(w)) d.workers.splice(d.workers.indexOf(w), 1);
  await Promise.all(workers.map(w => w.stop()));
}

/** A marker bed shared by the tests of a suite, with the tarball they send; set once `before` has run. */
export interface MarkerSuite {
  bed: MarkerBed;
  d: Distributed;
  client: CmpTestClient;
  /** A repo of one small file. */
  tgz: Buffer;
}

/**
 * `startMarkerBed(plugin, opts)` in a `before` hook of the suite being defined (call it inside
 * `describe`), and `stop()` in its `after` hook. Read the fields inside the tests and hooks.
 */
export function useMarkerBed(plugin: string, opts: Parameters<typeof startMarkerBed>[1]): MarkerSuite {
  const suite = {} as MarkerSuite;
  before(async () => {
    suite.bed = await startMarkerBed(plugin, opts);
    suite.d = suite.bed.d;
    suite.client = suite.bed.client;
    suite.tgz = await tarballOf({ 'f.txt': 'x' });
  });
  after(() => suite.bed.stop());
  return suite;
}
