import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { runProbeCommand } from '../exec/probe-command.js';
import type { Logger } from '../log.js';
import type { Engine } from '../plugin/engine.js';
import { TraceRecords } from './trace-records.js';

/** cmp-trace as `npm run build` compiles it, next to this module. */
export const BUILT_TRACER = fileURLToPath(new URL('./cmp-trace', import.meta.url));

/**
 * Linux 5.14: seccomp user notifications that let the notified call continue
 * (SECCOMP_USER_NOTIF_FLAG_CONTINUE, 5.5) and that answer an open with a descriptor the
 * supervisor installs (SECCOMP_ADDFD_FLAG_SEND, 5.14): cmp-trace opens files for the command
 * itself, on the path it recorded, so that no other thread can change that path before the
 * kernel reads it. Before 5.14 every record with an open would be given up.
 */
export const MIN_KERNEL: readonly [number, number] = [5, 14];

/** The file the probe's command looks for (absent): a relative path, so that both memory reads and the cwd lookup are exercised. */
const PROBE_PATH = 'cmp-trace-probe';

/**
 * Why the read recorder cannot work here, or undefined when it can: the kernel is recent
 * enough, the tracer is an executable file, and a trivial command traced by it (node looking
 * for an absent relative path) leaves a complete record that names that path. A tracer that
 * merely starts is not enough: a seccomp policy or a Yama ptrace_scope of 2 or 3 lets it run
 * but keeps it from reading the command's memory, and every record would then be given up.
 * `scratch` is a writable directory (the work root's parent) for the probe's own temp dir.
 */
export async function probeTracer(tracer: string, env: NodeJS.ProcessEnv, scratch: string, kernel = os.release()): Promise<string | undefined> {
  const version = /^(\d+)\.(\d+)/.exec(kernel);
  if (version && Number(version[1]) * 1000 + Number(version[2]) < MIN_KERNEL[0] * 1000 + MIN_KERNEL[1]) {
    return `Linux ${kernel} is older than ${MIN_KERNEL.join('.')} (seccomp user notifications that continue a call or answer it with a descriptor)`;
  }
  try {
    if (!(await fs.stat(tracer)).isFile()) return `the tracer ${tracer} is not a file`;
    await fs.access(tracer, fs.constants.X_OK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return `the tracer ${tracer} does not exist (npm run build compiles it with cc; or set CMP_OFFLOAD_TRACER)`;
    if (code === 'EACCES') return `the tracer ${tracer} is not executable`;
    return `the tracer ${tracer} cannot be checked: ${(err as Error).message}`;
  }
  let dir: string;
  try {
    dir = await fs.realpath(await fs.mkdtemp(path.join(scratch, '.cmp-trace-probe-')));
  } catch (err) {
    return `no temp dir for the probe in ${scratch}: ${(err as Error).message}`;
  }
  try {
    const out = path.join(dir, 'trace');
    const command = [process.execPath, 'node', '-e', `require('fs').existsSync(${JSON.stringify(PROBE_PATH)})`];
    // Its command dies with the tracer (PDEATHSIG).
    const failed = await runProbeCommand(tracer, ['--cpus=all', out, '10000', ...command], { cwd: dir, env, timeoutMs: 10_000 });
    if (failed?.timedOut) return 'the tracer did not finish a trivial command within 10 s';
    if (failed) return `the tracer failed on a trivial command: ${failed.text.split('\n')[0]}`;
    const records = new TraceRecords(10_000);
    // No record file reads as no record: the check below names what is missing.
    for (const line of (await fs.readFile(out, 'utf8').catch(() => '')).split('\n')) if (line !== '') records.line(line);
    const reads = records.finish();
    if (reads.incomplete) return `the record of a trivial command is incomplete: ${reads.incomplete}`;
    if (!reads.touched.has(path.join(dir, PROBE_PATH))) return 'the record of a trivial command misses the path it looked up';
    return undefined;
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}

const probes = new Map<string, Promise<string | undefined>>();

/**
 * probeTracer, once per tracer binary and process: at start where traced commands run (see
 * checkRecorder), else before the first traced run.
 */
export function recorderProblem(tracer: string, env: NodeJS.ProcessEnv, scratch: string): Promise<string | undefined> {
  let p = probes.get(tracer);
  if (!p) {
    p = probeTracer(tracer, env, scratch).catch((err: unknown) => `the probe failed: ${(err as Error).message}`);
    probes.set(tracer, p);
  }
  return p;
}

/**
 * Once at start, in the process whose plugin commands the traced cache records (standalone
 * proxy, worker with CMP_OFFLOAD_RUNNER_SOCKET=in-process, runner): probe the recorder and,
 * when it cannot work, say so in one log line. Such a process then runs every command
 * untraced: each GenerateManifest result is kept under the whole-tree key only, as with
 * CMP_OFFLOAD_CACHE=on, and counted as a fallback (cmp_offload_traced_cache_total).
 */
export async function checkRecorder(engine: Engine, log: Logger): Promise<void> {
  const { options } = engine;
  if (!options.cache.traced) return;
  const tracer = options.cache.trace.tracer || BUILT_TRACER;
  const problem = await recorderProblem(tracer, engine.baseEnv, path.dirname(options.workRoot));
  if (problem) {
    log.warn(
      { tracer, kernel: os.release() },
      `traced cache: the read recorder cannot work here: ${problem}; running as CMP_OFFLOAD_CACHE=on (whole-tree keys; every generation counts as cmp_offload_traced_cache_total{result="fallback"})`,
    );
  }
}
