import fs from 'node:fs/promises';
import { statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { IN_PROCESS } from '../cmp/config/options.js';
import { pluginSpecDigest } from '../cmp/config/plugin-config.js';
import { becomeNonDumpable } from '../cmp/exec/no-dump.js';
import { terminateAll } from '../cmp/exec/process-groups.js';
import { usableReaper } from '../cmp/exec/reaper.js';
import { resetWorkRoot, startProcess, untilStopSignal } from '../cmp/process-start.js';
import { logFailed, type Logger } from '../cmp/log.js';
import type { Engine } from '../cmp/plugin/engine.js';
import { extractPool } from '../cmp/tar/extract-pool.js';
import { checkRecorder } from '../cmp/trace/tracer-probe.js';
import { checkResetDirs, emptyDir, killOthers, mountPoints, notAlone, removeTree } from './isolation.js';
import { serveRunner, type RunnerIsolation } from './serve.js';

/**
 * The settings that give access to Redis and the signing key. The runner executes repository
 * code with its own uid: any of them in its env (or readable by it) would hand that code the
 * power to forge cache entries for every Application (docs/security.md#trust-boundary).
 */
export const CREDENTIAL_SETTINGS = [
  'CMP_OFFLOAD_REDIS_URL',
  'CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD',
  'CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD_FILE',
  'CMP_OFFLOAD_SIGNING_KEY',
  'CMP_OFFLOAD_SIGNING_KEY_FILE',
] as const;

/**
 * `cmp-offload runner`: runs a worker's plugin commands in a container that holds no
 * credentials. Reads the same plugin.yaml and exec/limit/trace settings as the worker, listens
 * on CMP_OFFLOAD_RUNNER_SOCKET, and on SIGTERM stops accepting, lets running requests finish
 * within CMP_OFFLOAD_SHUTDOWN_GRACE, then aborts them, kills their process groups and removes
 * its work root. Returns the process exit code.
 */
export async function runRunner(argv: string[]): Promise<number> {
  const held = CREDENTIAL_SETTINGS.filter(name => (process.env[name] ?? '') !== '');
  if (held.length > 0) {
    process.stderr.write(
      `cmp-offload runner refuses to start: ${held.join(', ')} set in its environment. The runner executes repository ` +
        `code, which could read them and forge signed results; give credentials to the worker container only.\n`,
    );
    return 1;
  }
  const started = await startRunnerProcess(argv);
  if (typeof started === 'number') return started;
  const { log, engine } = started;
  // Plugin code runs as this uid: keep it out of this process's memory, env and sockets.
  const dumpable = becomeNonDumpable();
  if (dumpable) log.warn({ reason: dumpable }, "plugin commands can read the runner's memory where the kernel lets a process trace another of its uid");
  const stopSignal = untilStopSignal(log, 'no new requests');
  const { options } = engine;
  const socketPath = options.runnerSocket!;
  extractPool.warm();
  // Find out now whether cmp-reap works, not in the first request's path.
  void usableReaper();
  // The traced commands run here: whether the recorder works is found out in the background and
  // said once; 'runner ready' does not wait for it (an early request waits for the same probe).
  const recorderChecked = checkRecorder(engine, log);
  const socket: OwnSocket = { path: socketPath, id: undefined, stopping: false };
  const isolation = await runnerIsolation(engine, log, recorderChecked, socket);
  let server;
  try {
    server = await serveRunner(socketPath, { engine, specDigest: pluginSpecDigest(engine.config), log }, isolation);
    socket.id = fileId(socketPath);
  } catch (err) {
    process.stderr.write(`cmp-offload runner cannot listen on ${socketPath} (CMP_OFFLOAD_RUNNER_SOCKET): ${(err as Error).message}\n`);
    return 1;
  }
  log.info({ socket: socketPath, plugin: engine.config.metadata.name, isolation: options.runner.isolation }, 'runner ready');

  await stopSignal;
  socket.stopping = true;

  await server.close(options.shutdownGraceMs);
  await terminateAll(5_000);
  await recorderChecked; // its probe command is ours to wait for (bounded by the probe's 10 s)
  await fs.rm(options.workRoot, { recursive: true, force: true }).catch(logFailed(log, 'stopping: removing the work root')); // EBUSY when a mount point
  await fs.rm(socketPath, { force: true }).catch(logFailed(log, 'stopping: removing the socket'));
  log.info('stopped');
  log.flush();
  return 0;
}

/** Start-up checks of a runner's settings and its work root; the exit code when they fail. */
async function startRunnerProcess(argv: string[]): Promise<Awaited<ReturnType<typeof startProcess>> | number> {
  try {
    const started = await startProcess(argv, 'runner', options => {
      if (options.runnerSocket === undefined || options.runnerSocket === IN_PROCESS) {
        throw new Error('cmp-offload runner needs CMP_OFFLOAD_RUNNER_SOCKET: the socket path to listen on (shared with the worker container)');
      }
      if (options.runnerSockets.length > 1) {
        throw new Error('cmp-offload runner listens on one socket: CMP_OFFLOAD_RUNNER_SOCKET holds several paths (a list is for the worker: one path per runner container)');
      }
      if (options.runner.isolation === 'isolated') {
        // Before anything of ours runs: at this point every other process is someone else's.
        const why = notAlone();
        if (why) throw new Error(`cmp-offload runner refuses to start with CMP_OFFLOAD_RUNNER_ISOLATION=isolated: ${why}`);
        checkResetDirs(options.runner.resetDirs, [
          { path: INSTALL_DIR, what: 'the runner itself' },
          { path: path.join(options.configDirPath, 'plugin.yaml'), what: 'its plugin.yaml' },
          { path: path.dirname(options.runnerSocket), what: 'its socket dir' },
        ], mountPoints());
      }
    });
    await resetWorkRoot(started.engine.options.workRoot);
    return started;
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    return 1;
  }
}

/** The runner's socket as the sweep checks it: the file it listens on, any file once it stops. */
interface OwnSocket {
  path: string;
  /** The socket file's identity once listening. */
  id: string | undefined;
  /** Stopping, the socket is gone on purpose (closing the server unlinks it). */
  stopping: boolean;
}

/** Isolated mode: a sweep after each run, and a runner that cannot sweep stops; shared mode: none (said once). */
async function runnerIsolation(engine: Engine, log: Logger, recorderChecked: Promise<void>, socket: OwnSocket): Promise<RunnerIsolation | undefined> {
  const { options } = engine;
  if (options.runner.isolation !== 'isolated') {
    log.warn('CMP_OFFLOAD_RUNNER_ISOLATION=shared: requests run at once and nothing is swept between them; a run can see, outlive and tamper with later runs (development only)');
    return undefined;
  }
  // The probes' processes are ours: the first sweep must not find them running.
  await Promise.all([usableReaper(), recorderChecked]);
  return {
    sweep: () => sweep(options.workRoot, options.runner.resetDirs, socket.path, socket.stopping ? 'any' : socket.id, log),
    onSweepFailed(err) {
      // Fail closed: with the runner gone its init exits, and the kernel kills what is left of the namespace.
      log.error({ err: err.message }, 'the sweep after a run failed: stopping the runner (its container restarts clean)');
      log.flush();
      process.exit(1);
    },
  };
}

/** Where this runner's code lives (dist/), which a reset dir must not hold. */
const INSTALL_DIR = path.resolve(fileURLToPath(new URL('..', import.meta.url)));

function fileId(p: string): string | undefined {
  try {
    const st = statSync(p);
    return `${st.dev}:${st.ino}`;
  } catch {
    return undefined; // no such file: no id to compare
  }
}

/**
 * The sweep after a run (isolation.ts): kill every other process, empty the reset dirs and the
 * work root, and check that the socket path still is our socket (a run may have put its own
 * listener there: the worker would hand it the next request). Logs its duration.
 */
async function sweep(workRoot: string, resetDirs: readonly string[], socketPath: string, socketId: string | undefined, log: Logger): Promise<void> {
  const started = performance.now();
  const killed = await killOthers();
  const mounts = mountPoints();
  for (const dir of resetDirs) await emptyDir(dir, mounts);
  await removeTree(workRoot);
  await fs.mkdir(workRoot, { recursive: true, mode: 0o700 });
  if (socketId !== 'any' && fileId(socketPath) !== socketId) throw new Error(`${socketPath} (CMP_OFFLOAD_RUNNER_SOCKET) is no longer this runner's socket: a run replaced it`);
  log.debug({ killed, ms: Math.round((performance.now() - started) * 10) / 10 }, 'swept after the run');
}
