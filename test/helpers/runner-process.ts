import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { BIN, REPO_ROOT } from './paths.js';
import { statFields } from './process-tree.js';
import { stopChild } from './stop-child.js';

/**
 * The uid the test runners run as. In Kubernetes the runner is another container of the pod:
 * its plugin code sees neither the worker's /proc/<pid>/environ (separate PID namespace) nor
 * its secret files (not mounted there). Tests approximate that with users: when the tests run
 * as root (CI), runners run as `nobody` (65534), which cannot read a root process's environ or
 * a 0600 root file; when they run as an ordinary user, runners run as that same user (no such
 * separation: the tests then check the protocol and the flows only).
 */
export const RUNNER_UID = process.getuid?.() === 0 ? 65534 : undefined;

/** The settings a runner refuses to hold (runner/main.ts). */
const CREDENTIALS = ['CMP_OFFLOAD_REDIS_URL', 'CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD', 'CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD_FILE', 'CMP_OFFLOAD_SIGNING_KEY', 'CMP_OFFLOAD_SIGNING_KEY_FILE'];

/**
 * Worker-only secrets the install gives the worker container alone: a runner would read a token
 * file it was given (and, as another uid, fail to start when it may not).
 */
const WORKER_ONLY = ['CMP_OFFLOAD_DASHBOARD_TOKEN', 'CMP_OFFLOAD_DASHBOARD_TOKEN_FILE'];

/** A test's env as a runner gets it: without the credentials and the worker-only secrets. */
export function runnerEnv(env: Record<string, string | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) if (v !== undefined && !CREDENTIALS.includes(k) && !WORKER_ONLY.includes(k)) out[k] = v;
  return out;
}

/**
 * A temp dir that plugin commands may write to (markers, counters), whoever runs them: open
 * to all (sticky, like /tmp) when runners run as another uid.
 */
export function pluginWritableTempDir(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  if (RUNNER_UID !== undefined) fs.chmodSync(dir, 0o1777);
  return dir;
}

/** Where a runner lives: its copy of the config dir, its work dir, its socket. */
export interface RunnerDirs {
  configDir: string;
  workDir: string;
  socketPath: string;
}

/**
 * Create a runner's dirs under `base` (a worker's temp dir, made traversable): the config dir
 * with `pluginYaml` and `files`, the work dir plugin commands see, the socket dir; owned by
 * the runner's uid.
 */
export function runnerDirs(base: string, pluginYaml: string, files: Record<string, string> = {}): RunnerDirs {
  const dirs: RunnerDirs = {
    configDir: path.join(base, 'runner-config'),
    workDir: path.join(base, 'work'),
    socketPath: path.join(base, 'run', 'runner.sock'),
  };
  const own = [dirs.configDir, dirs.workDir, path.dirname(dirs.socketPath)];
  for (const d of own) fs.mkdirSync(d, { recursive: true });
  fs.writeFileSync(path.join(dirs.configDir, 'plugin.yaml'), pluginYaml);
  for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(dirs.configDir, name), text);
  if (RUNNER_UID !== undefined) {
    fs.chmodSync(base, 0o711);
    for (const d of own) fs.chownSync(d, RUNNER_UID, RUNNER_UID);
  }
  return dirs;
}

export interface RunnerProcess {
  proc: ChildProcess;
  dirs: RunnerDirs;
  stderr(): string;
  exited: Promise<number | null>;
  /** Runs alone in a PID namespace of its own (see startRunner). */
  isolated: boolean;
  /** Then: the host pid of that namespace's PID 1 (cmp-reap --init). */
  init: number | undefined;
  /** SIGTERM and wait for the exit code (SIGKILL after `timeoutMs`). */
  stop(timeoutMs?: number): Promise<number | null>;
  /** SIGKILL, as a crashed container would go. */
  kill(): Promise<void>;
}

/**
 * Spawn `bin/cmp-offload <args>` with a pipe on stderr; resolves once it prints `ready`, rejects
 * if it exits first or `giveUp` aborts (it is then SIGKILLed).
 */
export async function spawnService(
  args: string[],
  env: Record<string, string | undefined>,
  ready: string,
  uid?: number,
  giveUp?: AbortSignal,
  wrap: string[] = [],
): Promise<{ proc: ChildProcess; stderr(): string; exited: Promise<number | null> }> {
  const argv = [...wrap, process.execPath, BIN, ...args];
  const proc = spawn(argv[0]!, argv.slice(1), {
    env,
    stdio: ['ignore', 'ignore', 'pipe'],
    ...(uid !== undefined ? { uid, gid: uid } : {}),
  });
  let stderr = '';
  const exited = new Promise<number | null>(resolve => proc.once('exit', code => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => fail(), 45_000);
    const fail = () => {
      clearTimeout(timer);
      giveUp?.removeEventListener('abort', fail);
      proc.kill('SIGKILL');
      reject(new Error(`${args[0]} did not start (exit ${proc.exitCode}): ${stderr}`));
    };
    giveUp?.addEventListener('abort', fail, { once: true });
    proc.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
      if (stderr.includes(`"${ready}"`)) {
        clearTimeout(timer);
        giveUp?.removeEventListener('abort', fail);
        resolve();
      }
    });
    proc.once('exit', () => {
      if (!stderr.includes(`"${ready}"`)) fail();
    });
  });
  return { proc, stderr: () => stderr, exited };
}

/** cmp-reap as the build leaves it: its `--init` mode is the runner container's PID 1. */
export const BUILT_REAPER = path.join(REPO_ROOT, 'dist', 'cmp', 'exec', 'cmp-reap');

/**
 * Whether runners run isolated, as a container would run one: alone in a PID namespace of their
 * own (`unshare --pid --fork --mount-proc`, which needs root) under `cmp-reap --init`. Without
 * root they run with CMP_OFFLOAD_RUNNER_ISOLATION=shared, and the isolation tests are skipped.
 */
export const RUNNERS_ISOLATED = process.getuid?.() === 0;

/**
 * The namespace a runner runs in, as a pod's runner container: `unshare` forks cmp-reap --init
 * as PID 1 of a new PID namespace (its own /proc), which runs the runner as the runner's uid.
 * `--kill-child`: SIGKILL to unshare takes PID 1, and the kernel then every process of the namespace.
 */
function isolatedWrap(): string[] {
  const user = RUNNER_UID !== undefined ? ['setpriv', `--reuid=${RUNNER_UID}`, `--regid=${RUNNER_UID}`, '--clear-groups'] : [];
  return ['unshare', '--pid', '--fork', '--mount-proc', '--kill-child=SIGKILL', ...user, BUILT_REAPER, '--init'];
}

/**
 * Start `cmp-offload runner` in `dirs` with `env` minus credentials, as the runner's uid (`giveUp`:
 * see spawnService); isolated (the default) when the tests run as root, unless `env` sets
 * CMP_OFFLOAD_RUNNER_ISOLATION=shared.
 */
export async function startRunner(dirs: RunnerDirs, env: Record<string, string | undefined>, giveUp?: AbortSignal): Promise<RunnerProcess> {
  const isolated = RUNNERS_ISOLATED && env.CMP_OFFLOAD_RUNNER_ISOLATION !== 'shared';
  const s = await spawnService(
    ['runner', '--config-dir-path', dirs.configDir],
    {
      ...runnerEnv(env),
      ARGOCD_CMP_WORKDIR: dirs.workDir,
      CMP_OFFLOAD_RUNNER_SOCKET: dirs.socketPath,
      ...(isolated ? {} : { CMP_OFFLOAD_RUNNER_ISOLATION: 'shared' }),
    },
    'runner ready',
    isolated ? undefined : RUNNER_UID,
    giveUp,
    isolated ? isolatedWrap() : [],
  );
  if (isolated) {
    const init = childOf(s.proc.pid!);
    return {
      ...s,
      dirs,
      isolated,
      init,
      // SIGTERM to PID 1, which hands it to the runner (unshare itself ignores it).
      async stop(timeoutMs = 15_000) {
        if (s.proc.exitCode !== null || s.proc.signalCode !== null) return s.proc.exitCode;
        try {
          process.kill(init, 'SIGTERM');
        } catch {
          // gone
        }
        const timer = setTimeout(() => s.proc.kill('SIGKILL'), timeoutMs);
        try {
          return await s.exited;
        } finally {
          clearTimeout(timer);
        }
      },
      // SIGKILL to PID 1: the kernel kills every process of the namespace (a dead container).
      // unshare exits once PID 1 is reaped, which is after every process of the namespace is gone.
      async kill() {
        try {
          process.kill(init, 'SIGKILL');
        } catch {
          // gone
        }
        const timer = setTimeout(() => s.proc.kill('SIGKILL'), 10_000);
        try {
          await s.exited;
        } finally {
          clearTimeout(timer);
        }
      },
    };
  }
  return {
    ...s,
    dirs,
    isolated,
    init: undefined,
    stop: (timeoutMs = 15_000) => stopChild(s.proc, timeoutMs),
    // A container that dies takes every process of its PID namespace with it: the plugin's too.
    async kill() {
      const groups = descendantGroups(s.proc.pid!);
      await killProcess(s.proc, s.exited);
      for (const pgid of groups) {
        try {
          process.kill(-pgid, 'SIGKILL');
        } catch {
          // gone already
        }
      }
    },
  };
}

/** The process groups of a process's descendants (its plugin commands lead their own groups). */
function descendantGroups(pid: number): Set<number> {
  const children = new Map<number, { ppid: number; pgrp: number }>();
  for (const p of fs.readdirSync('/proc').filter(d => /^\d+$/.test(d))) {
    try {
      const stat = fs.readFileSync(`/proc/${p}/stat`, 'latin1');
      const [, ppid, pgrp] = statFields(stat);
      children.set(Number(p), { ppid: Number(ppid), pgrp: Number(pgrp) });
    } catch {
      // exited meanwhile
    }
  }
  const own = children.get(pid)?.pgrp;
  const found = new Set<number>([pid]);
  const groups = new Set<number>();
  for (let grew = true; grew; ) {
    grew = false;
    for (const [p, { ppid, pgrp }] of children) {
      if (!found.has(p) && found.has(ppid)) {
        found.add(p);
        // Not the runner's own group: that is the test's.
        if (pgrp !== own && pgrp > 1) groups.add(pgrp);
        grew = true;
      }
    }
  }
  return groups;
}

export async function killProcess(proc: ChildProcess, exited: Promise<number | null>): Promise<void> {
  if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
  await exited;
}

/** The one child of `pid` (unshare's forked PID 1), from /proc. */
function childOf(pid: number): number {
  for (const p of fs.readdirSync('/proc').filter(d => /^\d+$/.test(d))) {
    try {
      if (Number(statFields(fs.readFileSync(`/proc/${p}/stat`, 'latin1'))[1]) === pid) return Number(p);
    } catch {
      // exited meanwhile
    }
  }
  throw new Error(`no child of ${pid}`);
}

/**
 * The host pids of the processes in the PID namespace of `init` (a host pid), each with its pid
 * inside that namespace: what a plugin writes as `$$` is the latter.
 */
export function namespaceProcesses(init: number): { hostPid: number; nsPid: number; alive: boolean }[] {
  let ns: string;
  try {
    ns = fs.readlinkSync(`/proc/${init}/ns/pid`);
  } catch {
    return [];
  }
  const out = [];
  for (const p of fs.readdirSync('/proc').filter(d => /^\d+$/.test(d))) {
    try {
      if (fs.readlinkSync(`/proc/${p}/ns/pid`) !== ns) continue;
      const status = fs.readFileSync(`/proc/${p}/status`, 'latin1');
      const nspid = /^NSpid:\s+(.*)$/m.exec(status)?.[1]?.trim().split(/\s+/);
      const state = /^State:\s+(\S)/m.exec(status)?.[1];
      out.push({ hostPid: Number(p), nsPid: Number(nspid?.at(-1)), alive: state !== 'Z' && state !== 'X' });
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/**
 * The host pid of the process that is `nsPid` in the PID namespace `ns` (`readlink
 * /proc/self/ns/pid` as the process saw it: plugin markers record both, since an isolated
 * runner's pids are its namespace's); undefined once it is gone.
 */
export function hostPid(nsPid: number, ns: string): number | undefined {
  for (const p of fs.readdirSync('/proc').filter(d => /^\d+$/.test(d))) {
    try {
      if (fs.readlinkSync(`/proc/${p}/ns/pid`) !== ns) continue;
      const nspid = /^NSpid:\s+(.*)$/m.exec(fs.readFileSync(`/proc/${p}/status`, 'latin1'))?.[1]?.trim().split(/\s+/);
      if (Number(nspid?.at(-1)) === nsPid) return Number(p);
    } catch {
      // exited meanwhile
    }
  }
  return undefined;
}

/** Write `bytes` (frames) to a runner at once; its frames back, once it hangs up. */
export async function askRunnerAtOnce(socketPath: string, bytes: Buffer, onAnswer?: () => void): Promise<{ type: number; payload: string }[]> {
  const socket = net.createConnection(socketPath);
  const got: Buffer[] = [];
  socket.on('connect', () => socket.write(bytes));
  socket.on('data', (chunk: Buffer) => {
    if (got.length === 0) onAnswer?.();
    got.push(chunk);
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('close', () => resolve());
    socket.once('error', reject);
  });
  const frames = [];
  for (let all = Buffer.concat(got); all.length >= 5; ) {
    const end = 5 + all.readUInt32BE(1);
    frames.push({ type: all.readUInt8(0), payload: all.subarray(5, end).toString('utf8') });
    all = all.subarray(end);
  }
  return frames;
}

/** The host id of process group `nsPgid` of PID namespace `ns`, from a live member (see hostPid). */
export function hostPgid(nsPgid: number, ns: string): number | undefined {
  for (const p of fs.readdirSync('/proc').filter(d => /^\d+$/.test(d))) {
    try {
      if (fs.readlinkSync(`/proc/${p}/ns/pid`) !== ns) continue;
      const status = fs.readFileSync(`/proc/${p}/status`, 'latin1');
      const nspgid = /^NSpgid:\s+(.*)$/m.exec(status)?.[1]?.trim().split(/\s+/);
      if (Number(nspgid?.at(-1)) !== nsPgid || /^State:\s+Z/m.test(status)) continue;
      return Number(statFields(fs.readFileSync(`/proc/${p}/stat`, 'latin1'))[2]);
    } catch {
      // exited meanwhile
    }
  }
  return undefined;
}
