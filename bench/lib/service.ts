import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export interface BareServer {
  proc: ChildProcess;
  socketPath: string;
  stop(): Promise<void>;
}

/**
 * Start bench/bare-hash-server in its own process on a temp socket; `env` adds to ours (e.g. a
 * profile preload); `extract` makes it stock-like (also gunzips and writes every file).
 */
export async function startBareServer(env: Record<string, string> = {}, extract = false): Promise<BareServer> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-bare-'));
  const socketPath = path.join(dir, 'bare.sock');
  const here = fileURLToPath(import.meta.url);
  const fromSource = here.endsWith('.ts');
  const entry = path.join(path.dirname(here), '..', `bare-hash-server.${fromSource ? 'ts' : 'js'}`);
  const proc = spawn(process.execPath, [...(fromSource ? ['--import', 'tsx'] : []), entry, socketPath, ...(extract ? ['--extract'] : [])], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, ...env },
  });
  await new Promise<void>((resolve, reject) => {
    proc.stdout!.once('data', () => resolve());
    proc.once('exit', code => reject(new Error(`bare server exited with ${code}`)));
  });
  return {
    proc,
    socketPath,
    async stop() {
      const exited = new Promise(r => proc.once('exit', r));
      proc.kill('SIGTERM');
      await exited;
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
