import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { metricNames, registry } from '../../../cmp/observe/metrics.js';
import { REPO_ROOT } from '../../helpers/paths.js';

const dashboard = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'infra/grafana/cmp-offload-dashboard.json'), 'utf8'));
const exprs: string[] = [
  ...dashboard.panels.flatMap((p: any) => (p.targets ?? []).map((t: any) => t.expr)),
  ...dashboard.templating.list.map((v: any) => v.query).filter((q: unknown) => typeof q === 'string'),
];

/** Series names a family exposes: histograms add _bucket, _sum and _count. */
function exportedSeries(): Set<string> {
  const out = new Set<string>();
  for (const m of registry.getMetricsAsArray()) {
    const type = (m as unknown as { type: string }).type;
    out.add(m.name);
    if (type === 'histogram' || type === 'summary') for (const s of ['_bucket', '_sum', '_count']) out.add(m.name + s);
  }
  return out;
}

test('the Grafana dashboard references only metric names the code exports', () => {
  const exported = exportedSeries();
  const used = new Set(exprs.flatMap(e => e.match(/\b(cmp_offload|process|nodejs)_[a-z_]+/g) ?? []));
  assert.ok(used.size >= 15, `only ${used.size} metrics on the dashboard`);
  for (const name of used) assert.ok(exported.has(name), `dashboard uses ${name}, which is not exported`);
});

test('the memory panel selects our processes only (the repo-server exports process_* too)', () => {
  const memory = exprs.filter(e => e.includes('process_resident_memory_bytes'));
  assert.equal(memory.length, 1);
  assert.match(memory[0]!, /\* on \(namespace, pod, instance\) group_left \(\) cmp_offload_info\b/);
});

test('the dashboard shows every family the issue asks for', () => {
  const text = exprs.join('\n');
  for (const name of [
    'cmp_offload_requests_total',
    'cmp_offload_stage_duration_seconds_bucket',
    'cmp_offload_ingested_bytes_total',
    'cmp_offload_cache_lookups_total',
    'cmp_offload_coalesced_requests_total',
    'cmp_offload_exec_timeouts_total',
    'cmp_offload_exec_kills_total',
    'cmp_offload_queue_jobs',
    'cmp_offload_concurrency_in_use',
    'cmp_offload_redis_used_memory_bytes',
    'cmp_offload_redis_maxmemory_bytes',
  ]) {
    assert.ok(text.includes(name), `${name} is not on the dashboard`);
  }
});

test('every exported metric follows the naming rules: cmp_offload_ prefix (the prom-client defaults unprefixed), units in counters and histograms', () => {
  for (const name of metricNames()) assert.match(name, /^(cmp_offload_[a-z0-9_]+|process_[a-z0-9_]+|nodejs_[a-z0-9_]+)$/);
  // Generic Node.js and process dashboards look these up by their usual names.
  for (const name of ['process_resident_memory_bytes', 'process_cpu_seconds_total', 'nodejs_eventloop_lag_seconds', 'nodejs_heap_size_used_bytes']) {
    assert.ok(metricNames().includes(name), `${name} is not exported`);
  }
  assert.deepEqual(metricNames().filter(n => /^cmp_offload_(process|nodejs)_/.test(n)), []);
  for (const m of registry.getMetricsAsArray()) {
    const type = (m as unknown as { type: string }).type;
    if (type === 'counter') assert.match(m.name, /_total$/, m.name);
    if (type === 'histogram' && m.name.startsWith('cmp_offload_') && !m.name.includes('nodejs')) assert.match(m.name, /_(seconds|bytes)$/, m.name);
  }
});
