import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';
import { loadAll } from 'js-yaml';
import { KUSTOMIZE, type Obj } from './infra-files.js';

/**
 * `kubectl kustomize` for the render tests, with the rule the render tests of manifests.test.ts
 * follow: without a usable kubectl the tests are skipped, except under CI=true, where they fail
 * and name the reason.
 */

/**
 * Why `kubectl kustomize` cannot render our kustomizations here, or undefined when it can. They
 * use kustomize `components` (kustomize v3.7; kubectl 1.21 embeds v4): Debian 12's
 * kubernetes-client (kubectl 1.20, kustomize v2) answers `json: unknown field "components"`.
 */
export function kubectlProblem(): string | undefined {
  const res = spawnSync('kubectl', ['version', '--client', '-o', 'json'], { encoding: 'utf8' });
  if (res.error || res.status !== 0) return `kubectl is not installed (${res.error?.message ?? res.stderr.trim()})`;
  let v: { clientVersion?: { gitVersion?: string; major?: string; minor?: string }; kustomizeVersion?: string };
  try {
    v = JSON.parse(res.stdout);
  } catch {
    return `kubectl version --client -o json printed no JSON: ${res.stdout.slice(0, 200)}`;
  }
  // kubectl 1.24+ reports its kustomize; 1.21-1.23 embed kustomize v4 without saying so.
  const kustomize = Number(/^v?(\d+)\./.exec(v.kustomizeVersion ?? '')?.[1] ?? 0);
  const client = [v.clientVersion?.major, v.clientVersion?.minor].map(n => parseInt(n ?? '0', 10));
  const recent = v.kustomizeVersion ? kustomize >= 4 : client[0]! > 1 || (client[0] === 1 && client[1]! >= 21);
  if (!recent) {
    return `kubectl ${v.clientVersion?.gitVersion ?? '?'} (kustomize ${v.kustomizeVersion ?? 'not reported'}) is too old: our overlays use kustomize components, which need kustomize v4+ (kubectl 1.21+)`;
  }
  return undefined;
}

export const kubectlMissing = kubectlProblem();
export const inCI = process.env.CI === 'true' || process.env.CI === '1';
/** The `skip` option of a render test: a reason outside CI when kubectl is unusable, else false. */
export const kubectlSkip: string | false = (!inCI && kubectlMissing) || false;

export function requireKubectl(): void {
  if (kubectlMissing) assert.fail(`${kubectlMissing}; CI=true requires the kustomize render tests to run (.ci/run installs kubernetes-client only when kubectl is missing, and Debian's is too old)`);
}

/** `kubectl kustomize DIR`, parsed. */
export function renderKustomize(dir: string): Obj[] {
  return (loadAll(execFileSync('kubectl', ['kustomize', dir], { encoding: 'utf8' })) as Obj[]).filter(o => o);
}

/**
 * Renders `resources` (objects written to a temporary dir) together with the given
 * infra/kustomize components, e.g. a stand-in argocd-repo-server and repo-server-sidecar.
 */
export function renderWithComponents(resources: Obj[], components: string[]): Obj[] {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-kustomize-'));
  try {
    const files = resources.map((o, i) => {
      const f = `resource-${i}.yaml`;
      fs.writeFileSync(path.join(tmp, f), JSON.stringify(o));
      return f;
    });
    const rel = (p: string) => path.relative(tmp, path.join(KUSTOMIZE, p));
    fs.writeFileSync(path.join(tmp, 'kustomization.yaml'), JSON.stringify({ resources: files, components: components.map(rel) }));
    return renderKustomize(tmp);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}
