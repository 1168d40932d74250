import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { CmpTestClient } from '../../test/helpers/grpc-client.js';
import { packRepo } from '../../test/helpers/repo.js';
import { generateCall, timedGenerate } from './calls.js';
import { pluginYaml } from '../../test/helpers/plugin-yaml.js';
import { pool } from '../../test/helpers/pool.js';

/**
 * A monorepo of `apps` small apps under `apps/app-<i>/` (a kustomization-like manifest and a
 * values file each) and a shared `lib/`, on disk, for the storm scenarios.
 */
export function makeMonorepo(apps: number): { root: string; appDir: (i: number) => string; remove: () => void } {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-monorepo-'));
  const appDir = (i: number) => path.join(root, 'apps', `app-${i}`);
  fs.mkdirSync(path.join(root, 'lib'), { recursive: true });
  fs.writeFileSync(path.join(root, 'lib', 'common.yaml'), 'labels:\n  team: platform\n');
  for (let i = 0; i < apps; i++) {
    fs.mkdirSync(appDir(i), { recursive: true });
    fs.writeFileSync(path.join(appDir(i), 'values.yaml'), `replicas: ${1 + (i % 3)}\nimage: app-${i}:v1\n`);
    fs.writeFileSync(
      path.join(appDir(i), 'manifests.yaml'),
      `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-${i}\ndata:\n  release: "1"\n` +
        `---\napiVersion: v1\nkind: Service\nmetadata:\n  name: app-${i}\nspec:\n  ports:\n  - port: 80\n`,
    );
  }
  return { root, appDir, remove: () => fs.rmSync(root, { recursive: true, force: true }) };
}

/** A new commit touching one app: its manifest changes, and (as after any checkout) every file gets a new mtime. */
export function commitChange(root: string, appDir: string, release: string): void {
  const file = path.join(appDir, 'manifests.yaml');
  fs.writeFileSync(file, fs.readFileSync(file, 'utf8').replace(/release: "[^"]*"/, `release: "${release}"`));
  const now = new Date();
  const touch = (p: string) => {
    fs.utimesSync(p, now, now);
    if (fs.statSync(p).isDirectory()) for (const e of fs.readdirSync(p)) touch(path.join(p, e));
  };
  touch(root);
}

/**
 * The plugin of the storm: ~100 ms of work (`sleep 0.1`), then the app's manifests; every
 * execution appends a line to `$MARKERS/runs` so that executions can be counted.
 */
export const STORM_PLUGIN = pluginYaml(
  'storm',
  'generate:\n  command: [sh, -c, "echo \\"$ARGOCD_APP_NAME\\" >> \\"$MARKERS/runs\\"; sleep 0.1; cat manifests.yaml"]',
);

/** Executions recorded in the markers dir so far. */
export function executions(markers: string): number {
  const f = path.join(markers, 'runs');
  return fs.existsSync(f) ? fs.readFileSync(f, 'utf8').split('\n').filter(Boolean).length : 0;
}

/** Pack every app directory on its own (the tarballs the repo-server sends with manifest-generate-paths). */
export async function packPerApp(appDirs: string[]): Promise<Buffer[]> {
  return pool(appDirs, 8, dir => packRepo(dir));
}

/** Refresh all apps: one GenerateManifest each, `concurrency` at a time; returns the wall time in ms. */
export async function refreshAll(client: CmpTestClient, tarballs: Buffer[], concurrency = 10): Promise<number> {
  const start = Date.now();
  await pool(tarballs, concurrency, (tgz, i) => timedGenerate(client, generateCall(tgz, {}, { appName: `app-${i}`, timeoutMs: 120_000 })));
  return Date.now() - start;
}
