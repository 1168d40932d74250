import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { OUR_ERRORS } from '../../../cmp/errors.js';
import { metricNames } from '../../../cmp/observe/metrics.js';
import { SETTINGS } from '../../../cmp/config/settings.js';
import { REPO_ROOT } from '../../helpers/paths.js';

const read = (p: string) => fs.readFileSync(path.join(REPO_ROOT, p), 'utf8');
const ops = read('docs/operations.md');
const troubleshooting = read('docs/troubleshooting.md');
/** README.md and every page of docs/. */
const docs = ['README.md', ...fs.readdirSync(path.join(REPO_ROOT, 'docs')).filter(f => f.endsWith('.md')).map(f => `docs/${f}`)].map(read);
/** The variables the code reads: options.ts parses them all, log.ts the two log settings. */
const code = read('cmp/config/options.ts') + read('cmp/log.ts');

/** Env names the code reads: `env.NAME`, `'NAME'` (helper calls), and `${name}_FILE` variants. */
function namesReadByCode(): Set<string> {
  const names = new Set<string>();
  for (const m of code.matchAll(/\benv\.((?:ARGOCD|CMP_OFFLOAD)_[A-Z0-9_]+)/g)) names.add(m[1]!);
  for (const m of code.matchAll(/'((?:ARGOCD|CMP_OFFLOAD)_[A-Z0-9_]+)'/g)) names.add(m[1]!);
  if (code.includes('`${name}_FILE`')) {
    for (const m of code.matchAll(/secretSetting\(env, '([A-Z0-9_]+)'/g)) names.add(`${m[1]}_FILE`);
  }
  return names;
}

/** The variables of the settings table (cmp/config/settings.ts), which docs/configuration.md is written from. */
function tableSettings(): Set<string> {
  return new Set(SETTINGS.flatMap(s => s.names).filter(n => /^(?:ARGOCD|CMP_OFFLOAD)_/.test(n)));
}

test('every setting in the settings table is read by the code, and every setting the code reads is in the table', () => {
  const documented = tableSettings();
  const read = namesReadByCode();
  assert.ok(read.size >= 30, `found only ${read.size} names in the code`);
  for (const n of documented) assert.ok(read.has(n), `the settings table documents ${n}, which the code does not read`);
  for (const n of read) assert.ok(documented.has(n), `the code reads ${n}, which the settings table does not list`);
});

test('every CMP_OFFLOAD_ setting the docs mention exists in the code', () => {
  const read = namesReadByCode();
  for (const text of docs) {
    for (const m of text.matchAll(/\bCMP_OFFLOAD_[A-Z0-9_]*[A-Z0-9]\b/g)) assert.ok(read.has(m[0]), `docs mention ${m[0]}, which the code does not read`);
  }
});

test('the troubleshooting page covers every error of OUR_ERRORS', () => {
  const section = troubleshooting.slice(troubleshooting.indexOf('## By error message'), troubleshooting.indexOf("## Argo CD's own error texts"));
  for (const [kind, entry] of Object.entries(OUR_ERRORS)) {
    const text = (entry.text as (...a: unknown[]) => string)(...Array(entry.text.length).fill('\u0000'));
    // The text before its first variable part must be quoted in the table.
    const fixed = text.split('\u0000')[0]!.split(' (')[0]!.trim();
    assert.ok(fixed.length >= 10, `${kind}: no fixed text to look for`);
    assert.ok(section.includes(fixed), `${kind} (${fixed}) is not in the troubleshooting table`);
  }
});

test('the metrics table of the operations guide lists exactly the exported cmp_offload_ families', () => {
  const exported = metricNames().filter(n => n.startsWith('cmp_offload_'));
  const section = ops.slice(ops.indexOf('### 3.2 Metrics'), ops.indexOf('### 3.3'));
  const listed = new Set([...section.matchAll(/`(cmp_offload_[a-z_]+)`/g)].map(m => m[1]!));
  for (const n of exported) assert.ok(listed.has(n), `${n} is not documented`);
  for (const n of listed) assert.ok(exported.includes(n), `docs list ${n}, which is not exported`);
});
