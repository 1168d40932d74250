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
  /** Its runner (default), else undefined. */
  runner: RunnerProcess | undefined;
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

  let dirs: RunnerDirs | undefined;
  try {
    dirs = mode === 'process' ? runnerDirs(base, opts.runnerPluginYaml ?? opts.pluginYaml, opts.files) : undefined;
  } catch (err) {
    cleanup();
    throw err;
  }
  const runnerSetting = dirs ? { CMP_OFFLOAD_RUNNER_SOCKET: dirs.socketPath } : mode === 'in-process' ? { CMP_OFFLOAD_RUNNER_SOCKET: 'in-process' } : {};
  // Both at once, as the containers of a pod start: the worker fetches jobs once its runner listens.
  const giveUp = new AbortController();
  const starting = [
    dirs ? startRunner(dirs, testEnv, giveUp.signal) : Promise.resolve(undefined),
    spawnService(['worker', '--config-dir-path', configDir], { ...testEnv, ARGOCD_CMP_WORKDIR: workDir, ...runnerSetting }, 'worker ready', undefined, giveUp.signal),
  ] as const;
  // One failing to start stops the other at once (the worker would wait for a runner that never comes).
  for (const p of starting) p.catch(() => giveUp.abort());
  const [r, w] = await Promise.allSettled(starting);
  if (r.status === 'rejected' || w.status === 'rejected') {
    if (r.status === 'fulfilled') await r.value?.kill();
    if (w.status === 'fulfilled') await killProcess(w.value.proc, w.value.exited);
    cleanup();
    throw r.status === 'rejected' ? r.reason : (w as PromiseRejectedResult).reason;
  }
  const runner: RunnerProcess | undefined = r.value;
  const worker = w.value;
  const { proc, exited } = worker;
  const handle: WorkerProcess = {
    proc,
    base,
    runner,
    async restartRunner() {
      handle.runner = await startRunner(dirs!, testEnv);
      return handle.runner;
    },
    stderr: worker.stderr,
    exited,
    async stop(timeoutMs = 15_000) {
      const [code] = await Promise.all([stopChild(proc, timeoutMs), handle.runner?.stop(timeoutMs)]);
      cleanup();
      return code;
    },
    async kill() {
      // The worker first: a runner dying under a live worker is a retried attempt, not the stall of a
      // crashed pod (in a pod both go at once; the worker usually notices nothing before it dies).
      await killProcess(proc, exited);
      await handle.runner?.kill();
      cleanup();
    },
  };
  return handle;
}
