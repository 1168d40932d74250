import fs from 'node:fs';
import path from 'node:path';
import assert from 'node:assert/strict';
import { auditRedisKeys, type KeyAudit } from './redis-audit.js';

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms));

/**
 * Pids of plugin processes of a scenario: every request carries the env entry
 * `ARGOCD_ENV_RELTOKEN=<token>`, which every command and its descendants inherit, and which the
 * service processes themselves do not have in their own environment.
 */
export function processesWith(token: string): number[] {
  const out: number[] = [];
  const needle = `ARGOCD_ENV_RELTOKEN=${token}\0`;
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      if (fs.readFileSync(`/proc/${entry}/environ`, 'latin1').includes(needle)) out.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

export function rssBytes(pid: number): number {
  return Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;
}

export interface InvariantInput {
  /** Token of the scenario's requests (ARGOCD_ENV_RELTOKEN). */
  token: string;
  /** Directories that must be empty (work roots, the services' TMPDIR). */
  emptyDirs: string[];
  redisUrl?: string;
  /** Service processes and their RSS after warm-up. */
  memory?: { name: string; pid: number; baseline: number }[];
  /** Allowed RSS growth over the baseline. */
  memorySlackBytes?: number;
}

export interface InvariantReport {
  leftoverProcesses: number;
  keys?: KeyAudit;
  memory: { name: string; baselineMiB: number; afterMiB: number }[];
}

const MiB = 1024 * 1024;

/**
 * The checks after every scenario: no plugin process left (orphans of a killed worker get a
 * few seconds to finish their short run), no file left in the work roots or temp dirs, every
 * Redis key with a TTL or an owner, and each service's RSS back within `memorySlackBytes` of
 * its baseline.
 */
export async function checkInvariants(input: InvariantInput): Promise<InvariantReport> {
  let left = processesWith(input.token);
  for (let i = 0; i < 100 && left.length; i++) {
    await sleep(100);
    left = processesWith(input.token);
  }
  assert.deepEqual(left, [], `plugin processes left running: ${left.join(', ')}`);

  for (const dir of input.emptyDirs) {
    const entries = fs.existsSync(dir) ? fs.readdirSync(dir) : [];
    assert.deepEqual(entries, [], `${dir} is not empty: ${entries.slice(0, 5).join(', ')}`);
  }

  let keys: KeyAudit | undefined;
  if (input.redisUrl) {
    keys = await auditRedisKeys(input.redisUrl);
    assert.deepEqual(keys.orphans, [], `Redis keys without TTL or owner: ${keys.orphans.slice(0, 5).join(', ')}`);
  }

  const memory: InvariantReport['memory'] = [];
  for (const m of input.memory ?? []) {
    // Give the collector a moment: RSS is measured, not the heap.
    let after = rssBytes(m.pid);
    for (let i = 0; i < 20 && after > m.baseline + (input.memorySlackBytes ?? 96 * MiB); i++) {
      await sleep(250);
      after = rssBytes(m.pid);
    }
    memory.push({ name: m.name, baselineMiB: m.baseline / MiB, afterMiB: after / MiB });
    assert.ok(
      after <= m.baseline + (input.memorySlackBytes ?? 96 * MiB),
      `${m.name} RSS ${(after / MiB).toFixed(0)} MiB, baseline ${(m.baseline / MiB).toFixed(0)} MiB`,
    );
  }
  return { leftoverProcesses: left.length, keys, memory };
}

/** Every file or directory under `root` whose name contains `needle` (for escape checks). */
export function findNamed(root: string, needle: string, skip: string[] = []): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    let entries: fs.Dirent[];
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      const p = path.join(dir, e.name);
      if (skip.includes(p)) continue;
      if (e.name.includes(needle)) out.push(p);
      if (e.isDirectory()) walk(p);
    }
  };
  walk(root);
  return out;
}
