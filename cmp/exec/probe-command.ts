import { spawn } from 'node:child_process';

export interface ProbeFailure {
  /** Its stderr (trimmed, at most 4 KiB), or, when it printed nothing, how it failed. */
  text: string;
  timedOut: boolean;
}

/**
 * Run a start-up probe (cmp-reap --probe, cmp-trace on a trivial command): undefined when it
 * exits 0. It leads a process group of its own, as every command we run, so that a Ctrl-C of
 * the service's group does not fail it; at `timeoutMs` that group is killed (SIGKILL: cmp-trace
 * ignores SIGTERM while it waits for its command).
 */
export function runProbeCommand(file: string, args: readonly string[], opts: { cwd?: string; env: NodeJS.ProcessEnv; timeoutMs: number }): Promise<ProbeFailure | undefined> {
  return new Promise(resolve => {
    const child = spawn(file, args, { cwd: opts.cwd, env: opts.env, stdio: ['ignore', 'ignore', 'pipe'], detached: true });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      if (stderr.length < 4096) stderr += d;
    });
    const fail = (why: string, timedOut = false) => resolve({ text: stderr.trim() || why, timedOut });
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
      fail(`did not finish within ${opts.timeoutMs / 1000} s`, true);
    }, opts.timeoutMs);
    child.on('error', err => {
      clearTimeout(timer);
      fail(err.message);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(undefined);
      else fail(`${[file, ...args].join(' ')} exited with ${code ?? signal}`);
    });
  });
}
