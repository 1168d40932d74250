import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { BIN } from './paths.js';

export interface ProxyProcess {
  proc: ChildProcess;
  base: string;
  socketPath: string;
  workRoot: string;
  /** Everything the process wrote to stderr so far. */
  stderr(): string;
  /** SIGTERM and wait for the exit code (SIGKILL after `timeoutMs`). */
  stop(timeoutMs?: number): Promise<number | null>;
}

export interface StartOptions {
  /** plugin.yaml text. */
  pluginYaml: string;
  /** Socket file name the plugin.yaml implies (e.g. `my-plugin.sock`). */
  socketName: string;
  env?: Record<string, string>;
  /** Extra files for the config dir. */
  files?: Record<string, string>;
  /** Use these directories instead of fresh ones under the temp base. */
  socketDir?: string;
  workDir?: string;
  /** Another launcher than the repository's bin/cmp-offload (a modified copy of the install). */
  bin?: string;
  /** Flags after `proxy --config-dir-path DIR` (e.g. `--loglevel debug`). */
  args?: string[];
}

/** Start `bin/cmp-offload proxy` on a temp socket like a sidecar would, and wait until it listens. */
export async function startProxy(opts: StartOptions): Promise<ProxyProcess> {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-e2e-'));
  const configDir = path.join(base, 'config');
  const socketDir = opts.socketDir ?? path.join(base, 'plugins');
  const workDir = opts.workDir ?? path.join(base, 'work');
  for (const d of [configDir, socketDir, workDir]) fs.mkdirSync(d, { recursive: true });
  fs.writeFileSync(path.join(configDir, 'plugin.yaml'), opts.pluginYaml);
  for (const [name, text] of Object.entries(opts.files ?? {})) fs.writeFileSync(path.join(configDir, name), text);
  const socketPath = path.join(socketDir, opts.socketName);
  const proc = spawn(process.execPath, [opts.bin ?? BIN, 'proxy', '--config-dir-path', configDir, ...(opts.args ?? [])], {
    env: {
      ...process.env,
      ARGOCD_PLUGINSOCKFILEPATH: socketDir,
      ARGOCD_CMP_WORKDIR: workDir,
      ARGOCD_CMP_SERVER_LOGLEVEL: 'warn',
      // Tarball copies go with their last request, so that a work root left non-empty is a leak;
      // the tests of kept copies set it.
      CMP_OFFLOAD_SPOOL_KEEP_BYTES: '0',
      ...opts.env,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  // 'close' comes after the last of stderr (a crash's message is read before the code is known);
  // a death by a signal is written into stderr() so that an assertion on the code shows it.
  const exited = new Promise<number | null>(resolve =>
    proc.once('close', (code, signal) => {
      if (signal) stderr += `[test helper: the proxy was killed by ${signal}]\n`;
      resolve(code);
    }),
  );
  const deadline = Date.now() + 45_000;
  // The socket file appears at bind(), a moment before listen(): only a connection that is
  // accepted shows the proxy is listening (a client in that moment gets ECONNREFUSED).
  const listening = () =>
    new Promise<boolean>(resolve => {
      const probe = net.createConnection(socketPath);
      probe.once('connect', () => {
        probe.destroy();
        resolve(true);
      });
      probe.once('error', () => resolve(false));
    });
  while (!(await listening())) {
    if (proc.exitCode !== null || proc.signalCode !== null || Date.now() > deadline) {
      proc.kill('SIGKILL');
      fs.rmSync(base, { recursive: true, force: true });
      throw new Error(`proxy did not start (exit ${proc.exitCode ?? proc.signalCode}): ${stderr}`);
    }
    await new Promise(r => setTimeout(r, 20));
  }
  return {
    proc,
    base,
    socketPath,
    workRoot: path.join(workDir, '_cmp_server'),
    stderr: () => stderr,
    async stop(timeoutMs = 15_000) {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
      const code = await exited;
      clearTimeout(timer);
      fs.rmSync(base, { recursive: true, force: true });
      return code;
    },
  };
}
