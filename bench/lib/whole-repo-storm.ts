import fs from 'node:fs';
import path from 'node:path';
import { startDistributed, type Distributed } from '../../test/helpers/distributed.js';
import { openCmpClient, type CmpTestClient } from '../../test/helpers/grpc-client.js';
import { appName, checkout, countRuns, generateApp, KUSTOMIZE_LIKE, monorepoFiles, usesBase } from '../../test/helpers/monorepo.js';
import { pluginYaml } from '../../test/helpers/plugin-yaml.js';
import { pluginWritableTempDir } from '../../test/helpers/runner-process.js';
import { pool } from '../../test/helpers/pool.js';

export type CacheMode = 'traced' | 'on' | 'off';

export interface Pass {
  /** Plugin executions during the pass. */
  runs: number;
  /** Wall time of refreshing every app. */
  ms: number;
  /** Sums over the workers' `job` log lines of the pass, by stage (`total`: the whole job), for results.json. */
  stagesMs: Record<string, number>;
}

export interface Storm {
  /** The first refresh of every app (not run with the cache off). */
  cold: Pass | undefined;
  appChanged: Pass;
  baseChanged: Pass;
}

/** What one pass saw, handed to `onPass` while the services still run. */
export interface PassView {
  commit: number;
  /** The checkout at this commit: repository-relative path → content. */
  files: Record<string, string>;
  /** Bytes of the tarball sent for every app (the whole repository). */
  tarballBytes: number;
  /** Each app's answer (JSON). */
  outputs: Map<string, string>;
}

/** A commit of the storm after the first: one file gets new content. */
export interface StormCommit {
  /** For a row's case. */
  what: string;
  file: string;
  content: string;
  /** The apps whose plugin reads `file` (known from the monorepo's layout, not from any trace). */
  readers(apps: number): string[];
}

/** Commit 2 of the storm. */
export const APP_EDIT: StormCommit = { what: "one app's file changed", file: `apps/${appName(7)}/config.yaml`, content: 'replicas: 70\n', readers: () => [appName(7)] };
/** Commit 3 of the storm. */
export const BASE_EDIT: StormCommit = {
  what: 'base/ changed',
  file: 'base/common.yaml',
  content: 'common: 2\n',
  readers: apps => appNames(apps).filter((_, i) => usesBase(i + 1)),
};

export function appNames(apps: number): string[] {
  return Array.from({ length: apps }, (_, i) => appName(i + 1));
}

export interface StormOptions {
  /** Env for the proxy only (its ops HTTP address, a dashboard token). */
  proxyEnv?: Record<string, string>;
  /** Env for the workers only. */
  workerEnv?: Record<string, string>;
  /** Called after each pass, before the next commit. */
  onPass?(view: PassView): Promise<void>;
  /** Symlinks in the checkout (path → raw target), the same at every commit. */
  links?: Record<string, string>;
}

/** Symlinks a monorepo may hold: a linked base directory nobody reads through, and a values file app 2 reads through a link. */
export const STORM_LINKS: Record<string, string> = { 'linked-base': 'base', [`apps/${appName(2)}/values.yaml`]: '../../base/labels.yaml' };

/**
 * Argo's default: the whole repo is sent for every app (no manifest-generate-paths). Refresh all
 * apps at commit 1 (cold), then after a commit touching one app's file, then after a commit
 * touching `base/` (read by every fifth app), each with a new revision as Argo sends it.
 */
export async function storm(cache: CacheMode, apps: number, opts: StormOptions = {}): Promise<Storm> {
  const work = pluginWritableTempDir('cmp-storm-whole-');
  const counter = path.join(work, 'runs');
  const checkoutDir = path.join(work, 'checkout');
  const files = monorepoFiles(apps);
  const d = await startDistributed({
    pluginYaml: pluginYaml('storm-whole', KUSTOMIZE_LIKE),
    socketName: 'storm-whole.sock',
    workers: 2,
    env: { CMP_OFFLOAD_CACHE: cache },
    proxyEnv: opts.proxyEnv,
    workerEnv: opts.workerEnv,
  });
  const client = openCmpClient(d.proxy.socketPath);
  try {
    const pass = async (commit: number) => {
      const tgz = await checkout(checkoutDir, files, {}, opts.links);
      const outputs = new Map<string, string>();
      const p = await refreshAll(d, client, tgz, apps, commit, counter, outputs);
      await opts.onPass?.({ commit, files: { ...files }, tarballBytes: tgz.length, outputs });
      return p;
    };
    // Without a cache every pass runs every app: the stock behaviour needs no warm-up pass.
    const cold = cache === 'off' ? undefined : await pass(1);
    files[APP_EDIT.file] = APP_EDIT.content;
    const appChanged = await pass(2);
    files[BASE_EDIT.file] = BASE_EDIT.content;
    const baseChanged = await pass(3);
    return { cold, appChanged, baseChanged };
  } finally {
    client.close();
    await d.stop();
    fs.rmSync(work, { recursive: true, force: true });
  }
}

async function refreshAll(
  d: Distributed,
  client: CmpTestClient,
  tgz: Buffer,
  apps: number,
  commit: number,
  counter: string,
  outputs: Map<string, string>,
): Promise<Pass> {
  const runsBefore = countRuns(counter).length;
  const logFrom = d.workers.map(w => w.stderr().length);
  const start = Date.now();
  await pool(appNames(apps), 10, async app => {
    const outcome = await generateApp(client, tgz, app, commit, counter);
    if (!('value' in outcome)) throw new Error(`${app} at commit ${commit} failed: ${JSON.stringify(outcome)}`);
    outputs.set(app, JSON.stringify(outcome.value));
  });
  const ms = Date.now() - start;
  const stagesMs: Record<string, number> = {};
  d.workers.forEach((w, i) => {
    for (const line of w.stderr().slice(logFrom[i]).split('\n')) {
      if (!line.includes('"msg":"job"')) continue;
      for (const [stage, v] of Object.entries((JSON.parse(line) as { ms?: Record<string, number> }).ms ?? {})) {
        stagesMs[stage] = Math.round((stagesMs[stage] ?? 0) + v);
      }
    }
  });
  return { runs: countRuns(counter).length - runsBefore, ms, stagesMs };
}
