import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BIN } from './paths.js';

export interface WorkerProcess {
  proc: ChildProcess;
  base: string;
  /** Everything the process wrote to stderr (its JSON log lines) so far. */
  stderr(): string;
  /** Resolves with the exit code once the process has exited. */
  exited: Promise<number | null>;
  /** SIGTERM and wait for the exit code (SIGKILL after `timeoutMs`). */
  stop(timeoutMs?: number): Promise<number | null>;
  /** SIGKILL at once, as a crashed pod would go. */
  kill(): Promise<void>;
}

export interface WorkerStartOptions {
  pluginYaml: string;
  env?: Record<string, string>;
  files?: Record<string, string>;
}

/** Start `bin/cmp-offload worker` with its own config and work dirs, and wait until it says it is ready. */
export async function startWorker(opts: WorkerStartOptions): Promise<WorkerProcess> {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-worker-'));
  const configDir = path.join(base, 'config');
  const workDir = path.join(base, 'work');
  for (const d of [configDir, workDir]) fs.mkdirSync(d);
  fs.writeFileSync(path.join(configDir, 'plugin.yaml'), opts.pluginYaml);
  for (const [name, text] of Object.entries(opts.files ?? {})) fs.writeFileSync(path.join(configDir, name), text);
  const proc = spawn(process.execPath, [BIN, 'worker', '--config-dir-path', configDir], {
    env: { ...process.env, ARGOCD_CMP_WORKDIR: workDir, ARGOCD_CMP_SERVER_LOGLEVEL: 'info', ...opts.env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>(resolve => proc.once('exit', code => resolve(code)));
  const deadline = Date.now() + 45_000;
  while (!stderr.includes('"worker ready"')) {
    if (proc.exitCode !== null || Date.now() > deadline) {
      proc.kill('SIGKILL');
      fs.rmSync(base, { recursive: true, force: true });
      throw new Error(`worker did not start (exit ${proc.exitCode}): ${stderr}`);
    }
    await new Promise(r => setTimeout(r, 20));
  }
  const cleanup = () => fs.rmSync(base, { recursive: true, force: true });
  return {
    proc,
    base,
    stderr: () => stderr,
    exited,
    async stop(timeoutMs = 15_000) {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
      const code = await exited;
      clearTimeout(timer);
      cleanup();
      return code;
    },
    async kill() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      await exited;
      cleanup();
    },
  };
}
