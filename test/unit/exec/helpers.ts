import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { contextWithDeadline, type Ctx } from '../../../cmp/context.js';
import { runCommand, type RunOptions } from '../../../cmp/exec/run-command.js';

/** A context that never ends on its own. */
export const noDeadline: Ctx = contextWithDeadline(undefined);

const made: string[] = [];
process.on('exit', () => made.forEach(d => fs.rmSync(d, { recursive: true, force: true })));

/** A fresh temp dir, removed when the test process exits. */
export function tmpDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-exec-'));
  made.push(dir);
  return dir;
}

/** runCommand with test defaults: no exec timeout, a generous output limit, a minimal env. */
export function run(argv: string[], extra: Partial<RunOptions> = {}): Promise<Buffer> {
  return runCommand({
    argv,
    cwd: os.tmpdir(),
    env: ['PATH=/usr/bin:/bin'],
    ctx: noDeadline,
    execTimeoutMs: 0,
    fatalTimeoutMs: 0,
    maxOutputBytes: 1 << 20,
    ...extra,
  });
}

/** Resolve with the rejection of a promise (fails if it resolves). */
export async function rejection(p: Promise<unknown>): Promise<Error & { code?: unknown }> {
  try {
    await p;
  } catch (err) {
    return err as Error & { code?: unknown };
  }
  throw new Error('expected a rejection');
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Poll until `cond` holds or `ms` passed; returns whether it held. */
export async function eventually(cond: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) return false;
    await sleep(50);
  }
  return true;
}

/** `kill(pid, 0)` succeeds: the pid (or with a negative id, the group) exists, zombies included. */
export function exists(id: number): boolean {
  try {
    process.kill(id, 0);
    return true;
  } catch {
    return false;
  }
}
