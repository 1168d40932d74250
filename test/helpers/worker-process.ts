import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { killProcess, runnerDirs, spawnService, startRunner, type RunnerDirs, type RunnerProcess } from './runner-process.js';
import { stopChild } from './stop-child.js';

export interface WorkerProcess {
  proc: ChildProcess;
  /**
   * Its temp dir. `<base>/work` is the work dir plugin commands see (ARGOCD_CMP_WORKDIR: the
   * runner's, or the worker's own when it runs them in-process).
   */
  base: string;
  /** Its (first) runner (default), else undefined. */
  runner: RunnerProcess | undefined;
  /** All its runners (one per CMP_OFFLOAD_CONCURRENCY when runners are isolated; see `runners`). */
  runners: RunnerProcess[];
  /** Start a runner again in the same dirs after `runner.kill()` (a restarted container). */
  restartRunner(): Promise<RunnerProcess>;
  /** Everything the process wrote to stderr (its JSON log lines) so far. */
  stderr(): string;
  /** Resolves with the exit code once the process has exited. */
  exited: Promise<number | null>;
  /** SIGTERM worker and runner, and wait for the worker's exit code (SIGKILL after `timeoutMs`). */
  stop(timeoutMs?: number): Promise<number | null>;
  /** SIGKILL worker and runner at once, as a crashed pod would go. */
  kill(): Promise<void>;
}

export interface WorkerStartOptions {
  pluginYaml: string;
  env?: Record<string, string>;
  files?: Record<string, string>;
  /**
   * Where plugin commands run: `process` (default) starts a `cmp-offload runner` next to the
   * worker, as the pod's second container; `in-process` runs them in the worker; `unset` leaves
   * CMP_OFFLOAD_RUNNER_SOCKET to `env`.
   */
  runner?: 'process' | 'in-process' | 'unset';
  /** A different plugin.yaml for the runner (skew tests). */
  runnerPluginYaml?: string;
  /**
   * Runner containers (sockets) of the pod: default CMP_OFFLOAD_CONCURRENCY of `env` (or 1),
   * as an isolated runner runs one request at a time.
   */
  runners?: number;
}

/**
 * Start `bin/cmp-offload worker` with its own config and work dirs, and by default its runner
 * (its own config copy and work dir, the test's env minus the credentials, another uid when
 * the tests run as root: see runner-process.ts); wait until both say they are ready.
 */
export async function startWorker(opts: WorkerStartOptions): Promise<WorkerProcess> {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-worker-'));
  const cleanup = () => fs.rmSync(base, { recursive: true, force: true });
  const mode = opts.runner ?? 'process';
  const configDir = path.join(base, 'config');
  const workDir = path.join(base, mode === 'process' ? 'worker-work' : 'work');
  for (const d of [configDir, workDir]) fs.mkdirSync(d);
  fs.writeFileSync(path.join(configDir, 'plugin.yaml'), opts.pluginYaml);
  for (const [name, text] of Object.entries(opts.files ?? {})) fs.writeFileSync(path.join(configDir, name), text);
  const testEnv = { ...process.env, ARGOCD_CMP_SERVER_LOGLEVEL: 'info', ...opts.env };

  const runnerCount = mode === 'process' ? (opts.runners ?? (Number((testEnv as Record<string, string | undefined>).CMP_OFFLOAD_CONCURRENCY) || 1)) : 0;
  const allDirs: RunnerDirs[] = [];
  try {
    const yaml = opts.runnerPluginYaml ?? opts.pluginYaml;
    for (let i = 0; i < runnerCount; i++) {
      const at = i === 0 ? base : path.join(base, `runner-${i}`);
      fs.mkdirSync(at, { recursive: true });
      allDirs.push(runnerDirs(at, yaml, opts.files));
    }
  } catch (err) {
    cleanup();
    throw err;
  }
  const dirs = allDirs[0];
  const runnerSetting = dirs
    ? { CMP_OFFLOAD_RUNNER_SOCKET: allDirs.map(d => d.socketPath).join(',') }
    : mode === 'in-process'
      ? { CMP_OFFLOAD_RUNNER_SOCKET: 'in-process' }
      : {};
  // All at once, as the containers of a pod start: the worker fetches jobs once its runners listen.
  const giveUp = new AbortController();
  const runnersStarting = allDirs.map(d => startRunner(d, testEnv, giveUp.signal));
  const workerStarting = spawnService(['worker', '--config-dir-path', configDir], { ...testEnv, ARGOCD_CMP_WORKDIR: workDir, ...runnerSetting }, 'worker ready', undefined, giveUp.signal);
  // One failing to start stops the others at once (the worker would wait for a runner that never comes).
  for (const p of [...runnersStarting, workerStarting]) p.catch(() => giveUp.abort());
  const rs = await Promise.allSettled(runnersStarting);
  const [w] = await Promise.allSettled([workerStarting]);
  const failed = [...rs, w].find((x): x is PromiseRejectedResult => x.status === 'rejected');
  if (failed) {
    for (const r of rs) if (r.status === 'fulfilled') await r.value.kill();
    if (w.status === 'fulfilled') await killProcess(w.value.proc, w.value.exited);
    cleanup();
    throw failed.reason;
  }
  const runners = rs.map(r => (r as PromiseFulfilledResult<RunnerProcess>).value);
  const worker = (w as PromiseFulfilledResult<Awaited<typeof workerStarting>>).value;
  const { proc, exited } = worker;
  const handle: WorkerProcess = {
    proc,
    base,
    runner: runners[0],
    runners,
    async restartRunner() {
      handle.runner = await startRunner(dirs!, testEnv);
      handle.runners[0] = handle.runner;
      return handle.runner;
    },
    stderr: worker.stderr,
    exited,
    async stop(timeoutMs = 15_000) {
      const [code] = await Promise.all([stopChild(proc, timeoutMs), ...handle.runners.map(r => r.stop(timeoutMs))]);
      cleanup();
      return code;
    },
    async kill() {
      // The worker first: a runner dying under a live worker is a retried attempt, not the stall of a
      // crashed pod (in a pod both go at once; the worker usually notices nothing before it dies).
      await killProcess(proc, exited);
      await Promise.all(handle.runners.map(r => r.kill()));
      cleanup();
    },
  };
  return handle;
}
