import type { ChildProcess } from 'node:child_process';

/**
 * SIGTERM a child process and resolve with its exit code once it has exited, SIGKILLing it
 * after `killAfterMs`. SIGCONT too: a stopped child (SIGSTOP, as tests stall Redis) handles
 * the SIGTERM only once it runs again. A child that has exited already resolves at once.
 */
export async function stopChild(child: ChildProcess, killAfterMs = 5_000): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
  // exitCode is set just before 'exit' is emitted: a child still running has not emitted it yet.
  const exited = new Promise<number | null>(resolve => child.once('exit', code => resolve(code)));
  child.kill('SIGTERM');
  child.kill('SIGCONT');
  const timer = setTimeout(() => child.kill('SIGKILL'), killAfterMs);
  try {
    return await exited;
  } finally {
    clearTimeout(timer);
  }
}
