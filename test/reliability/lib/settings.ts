import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** `npm run test:reliability -- --reduced` (CI) sets this: fewer calls, same checks. */
export const REDUCED = process.env.CMP_RELIABILITY_REDUCED === '1';

/** Where each suite appends its figures (one JSON line each); the runner prints them. */
export function recordFigures(scenario: string, figures: Record<string, number | string>): void {
  const file = process.env.CMP_RELIABILITY_FIGURES;
  const line = JSON.stringify({ scenario, ...figures });
  process.stdout.write(`# ${line}\n`);
  if (file) fs.appendFileSync(file, `${line}\n`);
}

/**
 * A private area for one scenario: the service processes get `tmp` as TMPDIR and `work` as
 * ARGOCD_CMP_WORKDIR, and nothing of theirs may end up anywhere else (`outside` is a target
 * hostile inputs aim at). The token goes into every request's env (ARGOCD_ENV_RELTOKEN) so
 * that leftover plugin processes can be found in /proc.
 */
export function sandbox(name: string): { root: string; tmp: string; work: string; outside: string; token: string; remove: () => void } {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), `cmp-rel-${name}-`));
  const dirs = { tmp: path.join(root, 'tmp'), work: path.join(root, 'work'), outside: path.join(root, 'outside') };
  for (const d of Object.values(dirs)) fs.mkdirSync(d);
  const token = `cmprel${path.basename(root).replace(/[^A-Za-z0-9]/g, '')}`;
  return { root, ...dirs, token, remove: () => fs.rmSync(root, { recursive: true, force: true }) };
}
