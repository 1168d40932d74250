import fs from 'node:fs';
import path from 'node:path';
import assert from 'node:assert/strict';
import type { Distributed } from '../../helpers/distributed.js';
import { rssBytes } from '../../helpers/rss.js';
import { auditRedisKeys, type KeyAudit } from './redis-audit.js';
import { recordFigures } from './settings.js';

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

/**
 * The invariants of a distributed scenario (the proxy's and every worker's work root, the
 * services' TMPDIR, Redis, memory), recorded as the figures `<scenario> invariants`.
 */
export async function checkDistributedInvariants(
  scenario: string,
  d: Distributed,
  box: { token: string; tmp: string },
  memory: NonNullable<InvariantInput['memory']>,
): Promise<void> {
  const report = await checkInvariants({
    token: box.token,
    emptyDirs: [box.tmp, d.proxy.workRoot, ...d.workers.map(w => path.join(w.base, 'work', '_cmp_server'))],
    redisUrl: d.redis.url,
    memory,
  });
  recordFigures(`${scenario} invariants`, {
    redisKeys: report.keys!.keys,
    keysWithTtl: report.keys!.withTtl,
    ...report.keys!.owned,
    memory: report.memory.map(m => `${m.name} ${m.baselineMiB.toFixed(0)}→${m.afterMiB.toFixed(0)} MiB`).join('; '),
  });
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
