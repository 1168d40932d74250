import { spawn } from 'node:child_process';
import { BIN } from './paths.js';

export interface KeeperProcess {
  /** Everything the process wrote to stderr so far (its JSON log). */
  stderr(): string;
  /** The log records whose msg contains `text`. */
  logged(text: string): Array<Record<string, unknown>>;
  stop(): Promise<number | null>;
}

/** Start `bin/cmp-offload keeper` with `env` (on top of the test's), and wait for its start line. */
export async function startKeeper(env: Record<string, string>, args: string[] = []): Promise<KeeperProcess> {
  const proc = spawn(process.execPath, [BIN, 'keeper', ...args], {
    env: { ...process.env, ARGOCD_CMP_SERVER_LOGLEVEL: 'info', ARGOCD_CMP_SERVER_LOGFORMAT: 'json', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>(resolve => proc.once('close', code => resolve(code)));
  const logged = (text: string) =>
    stderr
      .split('\n')
      .filter(l => l.startsWith('{'))
      .map(l => JSON.parse(l) as Record<string, unknown>)
      .filter(r => String(r.msg).includes(text));
  for (const end = Date.now() + 30_000; logged('keeper: keeping').length === 0; await new Promise(r => setTimeout(r, 20))) {
    if (proc.exitCode !== null || Date.now() > end) {
      proc.kill('SIGKILL');
      throw new Error(`keeper did not start (exit ${proc.exitCode}): ${stderr}`);
    }
  }
  return {
    stderr: () => stderr,
    logged,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}
