import fs from 'node:fs/promises';
import { IN_PROCESS } from '../../cmp/config/options.js';
import { pluginSpecDigest } from '../../cmp/config/plugin-config.js';
import { terminateAll } from '../../cmp/exec/process-groups.js';
import { usableReaper } from '../../cmp/exec/reaper.js';
import { resetWorkRoot, startProcess, untilStopSignal } from '../../cmp/process-start.js';
import { extractPool } from '../../cmp/tar/extract-pool.js';
import { checkRecorder } from '../../cmp/trace/tracer-probe.js';
import { serveRunner } from './serve.js';

/**
 * The settings that give access to Redis and the signing key. The runner executes repository
 * code with its own uid: any of them in its env (or readable by it) would hand that code the
 * power to forge cache entries for every Application (architecture §6).
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
  let started;
  try {
    started = await startProcess(argv, 'runner', options => {
      if (options.runnerSocket === undefined || options.runnerSocket === IN_PROCESS) {
        throw new Error('cmp-offload runner needs CMP_OFFLOAD_RUNNER_SOCKET: the socket path to listen on (shared with the worker container)');
      }
    });
    await resetWorkRoot(started.engine.options.workRoot);
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    return 1;
  }
  const { log, engine } = started;
  const stopSignal = untilStopSignal(log, 'no new requests');
  const { options } = engine;
  const socketPath = options.runnerSocket!;
  extractPool.warm();
  // Find out now whether cmp-reap works, not in the first request's path.
  void usableReaper();
  // The traced commands run here: whether the recorder works is found out in the background and
  // said once; 'runner ready' does not wait for it (an early request waits for the same probe).
  const recorderChecked = checkRecorder(engine, log);
  let server;
  try {
    server = await serveRunner(socketPath, { engine, specDigest: pluginSpecDigest(engine.config), log });
  } catch (err) {
    process.stderr.write(`cmp-offload runner cannot listen on ${socketPath} (CMP_OFFLOAD_RUNNER_SOCKET): ${(err as Error).message}\n`);
    return 1;
  }
  log.info({ socket: socketPath, plugin: engine.config.metadata.name }, 'runner ready');

  await stopSignal;

  await server.close(options.shutdownGraceMs);
  await terminateAll(5_000);
  await recorderChecked; // its probe command is ours to wait for (bounded by the probe's 10 s)
  await fs.rm(options.workRoot, { recursive: true, force: true }).catch(() => {});
  await fs.rm(socketPath, { force: true }).catch(() => {});
  log.info('stopped');
  log.flush();
  return 0;
}
