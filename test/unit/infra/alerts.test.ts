import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { registry } from '../../../cmp/observe/metrics.js';
import { STAGES } from '../../../cmp/observe/stages.js';
import { QUEUE_STATES } from '../../../cmp/observe/queue-depth.js';
import { REPO_ROOT } from '../../helpers/paths.js';
import { dump } from 'js-yaml';
import { one, type Obj } from './infra-files.js';
import { inCI, kubectlSkip, renderKustomize, requireKubectl } from './kubectl.js';

/**
 * The alert rules (components/alerts): valid against the prometheus-operator PrometheusRule CRD,
 * every PromQL expression uses only the metrics and labels the code exports, and every alert has
 * its runbook in docs/operations.md.
 */

const RULE_FILE = 'components/alerts/prometheusrule.yaml';
const rule = () => one(RULE_FILE, 'PrometheusRule');
const alerts = (r: Obj = rule()): Obj[] => r.spec.groups.flatMap((g: Obj) => g.rules).filter((x: Obj) => x.alert);

// --- The PrometheusRule CRD's schema (monitoring.coreos.com_prometheusrules.yaml, v1), by hand:
// no schema package for prometheus-operator is installed. Unknown fields are errors here (the
// API server would prune them silently, so a typo would lose the field).
const DURATION = /^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$/;
const GROUP_FIELDS = new Set(['name', 'interval', 'labels', 'limit', 'partial_response_strategy', 'query_offset', 'rules']);
const RULE_FIELDS = new Set(['alert', 'record', 'expr', 'for', 'keep_firing_for', 'labels', 'annotations']);
const stringMap = (v: unknown) => v === undefined || (typeof v === 'object' && v !== null && !Array.isArray(v) && Object.values(v).every(x => typeof x === 'string'));

export function validatePrometheusRule(o: Obj): void {
  const fail = (msg: string) => {
    throw new Error(`PrometheusRule ${o.metadata?.name}: ${msg}`);
  };
  if (o.apiVersion !== 'monitoring.coreos.com/v1' || o.kind !== 'PrometheusRule') fail('not a monitoring.coreos.com/v1 PrometheusRule');
  if (typeof o.metadata?.name !== 'string') fail('metadata.name is required');
  if (typeof o.spec !== 'object' || o.spec === null) fail('spec is required');
  for (const k of Object.keys(o.spec)) if (k !== 'groups') fail(`unknown field spec.${k}`);
  if (!Array.isArray(o.spec.groups)) fail('spec.groups must be an array');
  const names = new Set<string>();
  for (const [i, g] of (o.spec.groups as Obj[]).entries()) {
    const at = `spec.groups[${i}]`;
    for (const k of Object.keys(g)) if (!GROUP_FIELDS.has(k)) fail(`unknown field ${at}.${k}`);
    if (typeof g.name !== 'string' || g.name.length < 1) fail(`${at}.name is required`);
    if (names.has(g.name)) fail(`${at}.name ${g.name} is not unique (list-map key)`);
    names.add(g.name);
    for (const d of ['interval', 'query_offset']) if (g[d] !== undefined && !(typeof g[d] === 'string' && DURATION.test(g[d]))) fail(`${at}.${d} must be a duration`);
    if (g.limit !== undefined && !Number.isInteger(g.limit)) fail(`${at}.limit must be integer`);
    if (!stringMap(g.labels)) fail(`${at}.labels must map strings to strings`);
    if (g.rules !== undefined && !Array.isArray(g.rules)) fail(`${at}.rules must be an array`);
    for (const [j, r] of ((g.rules ?? []) as Obj[]).entries()) {
      const rat = `${at}.rules[${j}]`;
      for (const k of Object.keys(r)) if (!RULE_FIELDS.has(k)) fail(`unknown field ${rat}.${k}`);
      if (!(typeof r.expr === 'string' || Number.isInteger(r.expr))) fail(`${rat}.expr is required (string or integer)`);
      if ((r.alert === undefined) === (r.record === undefined)) fail(`${rat}: exactly one of alert and record`);
      for (const s of ['alert', 'record']) if (r[s] !== undefined && typeof r[s] !== 'string') fail(`${rat}.${s} must be a string`);
      if (r.for !== undefined && !(typeof r.for === 'string' && DURATION.test(r.for))) fail(`${rat}.for must be a duration`);
      if (r.keep_firing_for !== undefined && !(typeof r.keep_firing_for === 'string' && r.keep_firing_for.length > 0 && DURATION.test(r.keep_firing_for))) fail(`${rat}.keep_firing_for must be a duration`);
      if (!stringMap(r.labels)) fail(`${rat}.labels must map strings to strings`);
      if (!stringMap(r.annotations)) fail(`${rat}.annotations must map strings to strings`);
      if (r.record !== undefined && r.annotations !== undefined) fail(`${rat}: annotations are for alerting rules only`);
    }
  }
}

// --- A rough PromQL reader: metric names, their label matchers, and grouping labels.
const KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless', 'bool', 'offset', 'inf', 'nan']);
interface Matcher {
  label: string;
  op: string;
  value: string;
}
interface Selector {
  metric: string;
  matchers: Matcher[];
}
export function parsePromQL(expr: string): { selectors: Selector[]; grouping: string[]; functions: string[] } {
  const selectors: Selector[] = [];
  const grouping: string[] = [];
  const functions: string[] = [];
  let rest = expr.replace(/\[[^\]]*\]/g, ' '); // range and subquery selectors
  rest = rest.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)/g, (_m, _k, labels: string) => {
    grouping.push(...labels.split(',').map(s => s.trim()).filter(Boolean));
    return ' ';
  });
  const re = /([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*(\{[^}]*\})|([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\()?/g;
  for (let m; (m = re.exec(rest)); ) {
    if (m[2] !== undefined) {
      if (!m[1]) throw new Error(`selector without a metric name in ${expr}`);
      const matchers: Matcher[] = [];
      const body = m[2].slice(1, -1).trim();
      if (body) {
        for (const part of body.split(/,(?=\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(?:=~|!~|!=|=))/)) {
          const mm = /^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*$/.exec(part);
          if (!mm) throw new Error(`cannot read the matcher ${part} in ${expr}`);
          matchers.push({ label: mm[1]!, op: mm[2]!, value: mm[3]! });
        }
      }
      selectors.push({ metric: m[1], matchers });
    } else if (m[4]) functions.push(m[3]!);
    else if (!KEYWORDS.has(m[3]!.toLowerCase())) selectors.push({ metric: m[3]!, matchers: [] });
  }
  return { selectors, grouping, functions };
}
// Strip template-free numbers like 1/60 or 0.85: the regexp above only sees identifiers, and a
// number never starts with a letter, so nothing to do; `humanize…` only appear in annotations.

/** Label names (and, where the code fixes them, values) of every series the code exports. */
function exported(): Map<string, Map<string, Set<string> | null>> {
  const out = new Map<string, Map<string, Set<string> | null>>();
  for (const m of registry.getMetricsAsArray()) {
    const meta = m as unknown as { type: string; labelNames?: readonly string[] };
    const labels = new Map<string, Set<string> | null>((meta.labelNames ?? []).map(l => [l, VALUES[l] ?? null]));
    if (meta.type === 'histogram') {
      out.set(`${m.name}_bucket`, new Map([...labels, ['le', null]]));
      out.set(`${m.name}_sum`, labels);
      out.set(`${m.name}_count`, labels);
    } else out.set(m.name, labels);
  }
  return out;
}
/** Values the code gives a label (null: free). `outcome` is a gRPC status name on requests and a job outcome on jobs. */
const JOB_OUTCOMES = ['completed', 'cached', 'failed', 'retried', 'requeued', 'skew', 'skipped', 'unrecorded'];
const VALUES: Record<string, Set<string>> = {
  outcome: new Set([...Object.keys(Status).filter(k => isNaN(Number(k))), ...JOB_OUTCOMES]),
  state: new Set(Object.keys(QUEUE_STATES)),
  stage: new Set(STAGES),
  result: new Set(['hit', 'miss', 'coalesced', 'bypass', 'index', 'fallback']),
  reason: new Set(['fatal_timeout', 'canceled', 'output_limit']),
  role: new Set(['proxy', 'worker']),
  mode: new Set(['distributed', 'standalone']),
};
/** Labels Prometheus adds to every scraped series (ServiceMonitor / PodMonitor targets). */
const TARGET_LABELS = ['namespace', 'pod', 'job', 'instance', 'service', 'container', 'endpoint'];
/** Metrics of other exporters, each allowed in one alert only (docs/operations.md names the exporter). */
const EXTERNAL: Record<string, { alert: string; labels: string[] }> = {
  kube_horizontalpodautoscaler_status_current_replicas: { alert: 'CmpOffloadWorkersAtMax', labels: ['horizontalpodautoscaler', 'namespace'] },
  kube_horizontalpodautoscaler_spec_max_replicas: { alert: 'CmpOffloadWorkersAtMax', labels: ['horizontalpodautoscaler', 'namespace'] },
};
const FUNCTIONS = new Set(['sum', 'max', 'min', 'count', 'avg', 'rate', 'increase', 'histogram_quantile', 'max_over_time', 'min_over_time', 'avg_over_time', 'absent', 'clamp_min']);

/** Problems of one alert's expression against what the code exports (empty: fine). */
export function exprProblems(alert: string, expr: string, series = exported()): string[] {
  const problems: string[] = [];
  const { selectors, grouping, functions } = parsePromQL(expr);
  for (const f of functions) if (!FUNCTIONS.has(f)) problems.push(`unknown function ${f}`);
  const usable = new Set<string>(TARGET_LABELS);
  for (const { metric, matchers } of selectors) {
    const ext = EXTERNAL[metric];
    let labels: Map<string, Set<string> | null>;
    if (ext) {
      if (ext.alert !== alert) problems.push(`${metric} (another exporter's) is allowed only in ${ext.alert}`);
      labels = new Map(ext.labels.map(l => [l, null]));
    } else {
      const found = series.get(metric);
      if (!found) {
        problems.push(`${metric} is not exported`);
        continue;
      }
      labels = found;
    }
    for (const l of labels.keys()) usable.add(l);
    for (const { label, op, value } of matchers) {
      if (!labels.has(label) && !TARGET_LABELS.includes(label)) {
        problems.push(`${metric} has no label ${label}`);
        continue;
      }
      const allowed = labels.get(label);
      if (!allowed) continue;
      const values = op.endsWith('~') ? value.split('|') : [value];
      for (const v of values) if (!allowed.has(v)) problems.push(`${metric}{${label}} never takes the value ${v}`);
    }
  }
  for (const l of grouping) if (!usable.has(l)) problems.push(`groups by ${l}, a label of none of its metrics`);
  if (selectors.length === 0) problems.push('no metric');
  return problems;
}

test('the PrometheusRule validates against the prometheus-operator CRD schema', () => {
  const r = rule();
  assert.doesNotThrow(() => validatePrometheusRule(r));
  assert.ok(alerts(r).length >= 12, `only ${alerts(r).length} alerts`);
  for (const a of alerts(r)) {
    assert.match(a.alert, /^CmpOffload[A-Za-z]+$/);
    assert.ok(['critical', 'warning', 'info'].includes(a.labels?.severity), `${a.alert}: severity`);
    assert.ok(a.annotations?.summary, `${a.alert}: summary`);
  }
});

test('the schema check can fail: a typo, a bad duration, alert and record together', () => {
  const typo = rule();
  typo.spec.groups[0].rules[0].expresion = typo.spec.groups[0].rules[0].expr;
  assert.throws(() => validatePrometheusRule(typo), /unknown field .*expresion/);
  const bad = rule();
  bad.spec.groups[0].rules[0].for = '10 minutes';
  assert.throws(() => validatePrometheusRule(bad), /for must be a duration/);
  const both = rule();
  both.spec.groups[0].rules[0].record = 'x';
  assert.throws(() => validatePrometheusRule(both), /exactly one of alert and record/);
  const noExpr = rule();
  delete noExpr.spec.groups[1].rules[0].expr;
  assert.throws(() => validatePrometheusRule(noExpr), /expr is required/);
});

test('the alerts cover what the issue lists', () => {
  const names = new Set(alerts().map(a => a.alert));
  for (const a of [
    'CmpOffloadQueueBacklog',
    'CmpOffloadQueueWaitHigh',
    'CmpOffloadWorkersAtMax',
    'CmpOffloadErrorRatioHigh',
    'CmpOffloadDeadlineExceeded',
    'CmpOffloadExecTimeouts',
    'CmpOffloadJobsFailing',
    'CmpOffloadJobsGivenUp',
    'CmpOffloadRedisDisconnected',
    'CmpOffloadCacheHitRatioLow',
    'CmpOffloadScaleToZeroStuck',
    'CmpOffloadRedisMemoryHigh',
  ]) {
    assert.ok(names.has(a), `no alert ${a}`);
  }
});

/** What the code exports, plus the series the rule file records (keeping the labels they group by). */
function exportedAndRecorded(r: Obj = rule()): ReturnType<typeof exported> {
  const series = exported();
  for (const rec of r.spec.groups.flatMap((g: Obj) => g.rules).filter((x: Obj) => x.record)) {
    series.set(rec.record, new Map(parsePromQL(rec.expr).grouping.map(l => [l, null])));
  }
  return series;
}

test('every recording rule reads only what the code exports', () => {
  const records = rule().spec.groups.flatMap((g: Obj) => g.rules).filter((x: Obj) => x.record);
  assert.ok(records.length >= 1);
  for (const r of records) assert.deepEqual(exprProblems(r.record, r.expr), [], `${r.record}: ${r.expr}`);
});

test('every alert expression uses only metrics, labels and label values the code exports', () => {
  const series = exportedAndRecorded();
  let checked = 0;
  for (const a of alerts()) {
    assert.deepEqual(exprProblems(a.alert, a.expr, series), [], `${a.alert}: ${a.expr}`);
    checked += parsePromQL(a.expr).selectors.length;
  }
  assert.ok(checked >= 20, `only ${checked} selectors read: the parser misses some`);
  // jobGaveUp answers ABORTED (CmpOffloadJobsGivenUp counts that outcome).
  const errors = fs.readFileSync(path.join(REPO_ROOT, 'cmp/errors.ts'), 'utf8');
  assert.match(errors, /jobGaveUp: \{[^}]*code: Status\.ABORTED/);
  // The job outcomes listed above are those the processor counts.
  const processor = fs.readFileSync(path.join(REPO_ROOT, 'worker/processor.ts'), 'utf8');
  for (const o of JOB_OUTCOMES) assert.ok(processor.includes(`'${o}'`), `worker/processor.ts never counts outcome ${o}`);
});

test('the expression check can fail: an unknown metric, label, value or grouping label', () => {
  const series = exported();
  assert.match(exprProblems('X', 'rate(cmp_offload_request_total[5m]) > 0', series).join(), /cmp_offload_request_total is not exported/);
  assert.match(exprProblems('X', 'cmp_offload_jobs_total{status="failed"}', series).join(), /has no label status/);
  assert.match(exprProblems('X', 'cmp_offload_queue_jobs{state=~"wait|waiting"}', series).join(), /never takes the value waiting/);
  assert.match(exprProblems('X', 'sum by (plugin) (cmp_offload_queue_jobs)', series).join(), /groups by plugin/);
  assert.match(exprProblems('X', 'kube_horizontalpodautoscaler_spec_max_replicas > 0', series).join(), /allowed only in CmpOffloadWorkersAtMax/);
  assert.match(exprProblems('CmpOffloadRedisMemoryHigh', 'redis_memory_used_bytes > 0', series).join(), /redis_memory_used_bytes is not exported/);
  assert.match(exprProblems('X', 'histogram_quantile(0.9, cmp_offload_stage_duration_seconds_bucket{stage="queue"})', series).join(), /never takes the value queue/);
  assert.deepEqual(exprProblems('X', 'histogram_quantile(0.9, sum by (le) (rate(cmp_offload_stage_duration_seconds_bucket{stage="exec"}[5m])))', series), []);
});

test('Redis memory high reads our own gauges (no redis_exporter), both of them', () => {
  const memory = alerts().find(a => a.alert === 'CmpOffloadRedisMemoryHigh')!;
  const read = parsePromQL(memory.expr).selectors.map(s => s.metric).sort();
  assert.deepEqual(read, ['cmp_offload_redis_maxmemory_bytes', 'cmp_offload_redis_used_memory_bytes']);
  for (const m of read) assert.ok(exported().has(m), `${m} is not exported`);
});

test('the backlog threshold is what the workers at KEDA\'s maximum run at once; WorkersAtMax watches KEDA\'s HPA', () => {
  const so = one('base/worker-scaledobject.yaml', 'ScaledObject');
  const worker = one('base/worker-deployment.yaml', 'Deployment').spec.template.spec.containers.find((c: Obj) => c.name === 'worker');
  const concurrency = Number(worker.env.find((e: Obj) => e.name === 'CMP_OFFLOAD_CONCURRENCY').value);
  const backlog = alerts().find(a => a.alert === 'CmpOffloadQueueBacklog')!;
  assert.match(backlog.expr, new RegExp(`> ${so.spec.maxReplicaCount * concurrency}\\s*$`));
  const atMax = alerts().find(a => a.alert === 'CmpOffloadWorkersAtMax')!;
  // KEDA names the HPA it creates keda-hpa-<ScaledObject name>.
  for (const s of parsePromQL(atMax.expr).selectors) {
    assert.deepEqual(s.matchers, [{ label: 'horizontalpodautoscaler', op: '=', value: `keda-hpa-${so.metadata.name}` }]);
  }
});

/** GitHub's anchor of a Markdown heading. */
const anchorOf = (heading: string) => heading.trim().toLowerCase().replace(/[^\w\- ]/g, '').replace(/ /g, '-');

/** Where every runbook_url points: the project's docs, absolute (docs/operations.md#8-alerts says how to rebase it). */
const HOMEPAGE = (JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { homepage: string }).homepage;
const RUNBOOK_BASE = `${HOMEPAGE}/blob/main/docs/operations.md`;

test('every alert has a description, a for: duration, and a runbook section its absolute runbook_url points at', () => {
  const ops = fs.readFileSync(path.join(REPO_ROOT, 'docs/operations.md'), 'utf8');
  const anchors = new Set([...ops.matchAll(/^#{2,4} (.+)$/gm)].map(m => anchorOf(m[1]!)));
  for (const a of alerts()) {
    assert.equal(a.annotations.runbook_url, `${RUNBOOK_BASE}#${a.alert.toLowerCase()}`, `${a.alert}: runbook_url`);
    assert.ok(anchors.has(a.alert.toLowerCase()), `docs/operations.md has no section "${a.alert}"`);
    // The section says what to look at: at least one metric or command.
    const section = ops.split(new RegExp(`^#{2,4} ${a.alert}$`, 'm'))[1]!.split(/^#{2,4} /m)[0]!;
    assert.ok(section.trim().length > 80, `${a.alert}: the runbook section is nearly empty`);
    assert.ok(typeof a.annotations.description === 'string' && a.annotations.description.length > 60, `${a.alert}: no description`);
    assert.ok(a.for && a.for !== '0', `${a.alert}: no for: duration (it would page on one evaluation)`);
  }
});

test("the runbook section's replacement rebases every runbook_url on a mirror (skipped without kubectl 1.21+ outside CI)", { skip: kubectlSkip }, () => {
  requireKubectl();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-runbooks-'));
  try {
    const mirror = 'https://git.example.com/ops/cmp-offload/docs/operations.md';
    fs.writeFileSync(path.join(tmp, 'cm.yaml'), JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'runbook-base' }, data: { url: mirror } }));
    fs.writeFileSync(
      path.join(tmp, 'kustomization.yaml'),
      JSON.stringify({
        resources: ['cm.yaml'],
        components: [path.relative(tmp, path.join(REPO_ROOT, 'infra/kustomize/components/alerts'))],
        // As docs/operations.md#8-alerts shows it.
        replacements: [
          {
            source: { kind: 'ConfigMap', name: 'runbook-base', fieldPath: 'data.url' },
            targets: [{ select: { kind: 'PrometheusRule', name: 'cmp-offload' }, fieldPaths: ['spec.groups.*.rules.*.annotations.runbook_url'], options: { delimiter: '#', index: 0 } }],
          },
        ],
      }),
    );
    const rendered = renderKustomize(tmp).find(o => o.kind === 'PrometheusRule')!;
    const urls = alerts(rendered).map(a => a.annotations.runbook_url);
    assert.deepEqual(urls, alerts().map(a => `${mirror}#${a.alert.toLowerCase()}`));
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

test("the dashboard's cache hit ratio is the recording rule's expression (one definition)", () => {
  const record = rule().spec.groups.flatMap((g: Obj) => g.rules).find((x: Obj) => x.record === 'namespace:cmp_offload_cache_hit_ratio:rate5m');
  assert.ok(record, 'no hit-ratio recording rule');
  const dashboard = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'infra/grafana/cmp-offload-dashboard.json'), 'utf8'));
  const panel = dashboard.panels.find((p: Obj) => p.title === 'Cache hit ratio');
  const norm = (e: string) => e.replace(/namespace=~"\$namespace",\s*/g, '').replace(/\s+/g, ' ').trim();
  assert.equal(norm(panel.targets[0].expr), norm(record.expr));
  const alert = alerts().find(a => a.alert === 'CmpOffloadCacheHitRatioLow')!;
  assert.match(alert.expr, /namespace:cmp_offload_cache_hit_ratio:rate5m/);
});

/**
 * Prometheus' own rule checker (Debian: package prometheus; .ci/run unpacks its promtool and names
 * it in PROMTOOL). Like the kustomize render tests: skipped without it, except under CI=true.
 */
const promtool = process.env.PROMTOOL ?? 'promtool';
const promtoolMissing = spawnSync(promtool, ['--version'], { encoding: 'utf8' }).status !== 0;
const promtoolSkip = !inCI && promtoolMissing && 'promtool is not installed';
function requirePromtool(): void {
  if (promtoolMissing) assert.fail(`promtool (${promtool}) does not run; CI=true requires the promtool rule tests (.ci/run unpacks Debian's prometheus package)`);
}

/** `promtool check rules` on the groups of a PrometheusRule: its exit status and output. */
function promtoolCheck(r: Obj): { status: number | null; out: string } {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-rules-'));
  try {
    const file = path.join(tmp, 'rules.yaml');
    fs.writeFileSync(file, dump({ groups: r.spec.groups }));
    const res = spawnSync(promtool, ['check', 'rules', file], { encoding: 'utf8' });
    return { status: res.status, out: res.stdout + res.stderr };
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

test('promtool parses every expression and annotation template (skipped without promtool outside CI; PROMTOOL= names it)', { skip: promtoolSkip }, () => {
  requirePromtool();
  const ok = promtoolCheck(rule());
  assert.equal(ok.status, 0, ok.out);
  const rules = rule().spec.groups.flatMap((g: Obj) => g.rules).length;
  assert.match(ok.out, new RegExp(`SUCCESS: ${rules} rules found`));
  const bad = rule();
  bad.spec.groups[0].rules[0].expr = 'sum by (namespace (cmp_offload_queue_jobs)';
  assert.notEqual(promtoolCheck(bad).status, 0, 'promtool accepted a broken expression');
});

/** `promtool test rules` on the rules with the given unit tests (Prometheus' rule_files format). */
function promtoolTest(r: Obj, tests: Obj[]): { status: number | null; out: string } {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-rules-'));
  try {
    fs.writeFileSync(path.join(tmp, 'rules.yaml'), dump({ groups: r.spec.groups }));
    fs.writeFileSync(path.join(tmp, 'test.yaml'), dump({ rule_files: ['rules.yaml'], evaluation_interval: '1m', tests }));
    const res = spawnSync(promtool, ['test', 'rules', 'test.yaml'], { encoding: 'utf8', cwd: tmp });
    return { status: res.status, out: res.stdout + res.stderr };
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

/**
 * promtool unit tests of one alert: silent at `quiet`, then exactly one alert with these labels
 * and summary at `fires` (its description and runbook_url as the rule has them).
 */
function quietThenFires(alertname: string, quiet: string, fires: string, labels: Record<string, string>, summary: string): Obj[] {
  const { runbook_url, description } = alerts().find(a => a.alert === alertname)!.annotations;
  return [
    { eval_time: quiet, alertname, exp_alerts: [] },
    { eval_time: fires, alertname, exp_alerts: [{ exp_labels: labels, exp_annotations: { runbook_url, description, summary } }] },
  ];
}

test('promtool: scale-to-zero stuck fires with jobs waiting and no worker, not with one; Redis disconnected fires per pod (skipped without promtool outside CI)', { skip: promtoolSkip }, () => {
  requirePromtool();
  const proxy = 'namespace="argocd",pod="repo-0"';
  const tests = [
    {
      interval: '1m',
      input_series: [
        { series: `cmp_offload_queue_jobs{${proxy},queue="p",state="wait"}`, values: '3x15' },
        { series: `cmp_offload_queue_jobs{${proxy},queue="p",state="active"}`, values: '0x15' },
        { series: `cmp_offload_info{${proxy},role="proxy",plugin="p",mode="distributed"}`, values: '1x15' },
        { series: `cmp_offload_redis_connected{${proxy}}`, values: '1 1 1 0x12' },
      ],
      alert_rule_test: [
        ...quietThenFires('CmpOffloadScaleToZeroStuck', '2m', '5m', { severity: 'critical', namespace: 'argocd' }, '3 cmp-offload jobs wait in namespace argocd and no worker runs'),
        ...quietThenFires('CmpOffloadRedisDisconnected', '4m', '12m', { severity: 'critical', namespace: 'argocd', pod: 'repo-0' }, 'repo-0 has not been connected to Redis for 4 minutes'),
      ],
    },
    {
      interval: '1m',
      input_series: [
        { series: `cmp_offload_queue_jobs{${proxy},queue="p",state="wait"}`, values: '3x15' },
        { series: 'cmp_offload_info{namespace="argocd",pod="worker-0",role="worker",plugin="p",mode="distributed"}', values: '1x15' },
      ],
      alert_rule_test: [{ eval_time: '10m', alertname: 'CmpOffloadScaleToZeroStuck', exp_alerts: [] }],
    },
  ];
  const res = promtoolTest(rule(), tests);
  assert.equal(res.status, 0, res.out);
  // The same tests fail when the rule loses its "no worker" condition.
  const broken = rule();
  const stuck = alerts(broken).find(a => a.alert === 'CmpOffloadScaleToZeroStuck')!;
  stuck.expr = stuck.expr.replace(/unless[\s\S]*$/, '');
  assert.notEqual(promtoolTest(broken, tests).status, 0, 'the unit tests pass without the no-worker condition');
});

test('promtool: Redis memory high fires once per namespace above 85% of maxmemory, never without a limit (skipped without promtool outside CI)', { skip: promtoolSkip }, () => {
  requirePromtool();
  const gauges = (ns: string, pod: string, used: number, max: number) => [
    { series: `cmp_offload_redis_used_memory_bytes{namespace="${ns}",pod="${pod}"}`, values: `${used}x15` },
    { series: `cmp_offload_redis_maxmemory_bytes{namespace="${ns}",pod="${pod}"}`, values: `${max}x15` },
  ];
  const tests = [
    {
      interval: '1m',
      input_series: [
        // Two pods of one namespace read the same Redis: one alert.
        ...gauges('argocd', 'repo-0', 900, 1000),
        ...gauges('argocd', 'worker-0', 900, 1000),
        ...gauges('nolimit', 'repo-0', 900, 0),
        ...gauges('fine', 'repo-0', 500, 1000),
      ],
      alert_rule_test: quietThenFires('CmpOffloadRedisMemoryHigh', '5m', '12m', { severity: 'warning', namespace: 'argocd' }, 'the Redis of cmp-offload in namespace argocd uses 90% of its maxmemory'),
    },
  ];
  const res = promtoolTest(rule(), tests);
  assert.equal(res.status, 0, res.out);
  // Without the "> 0" guard, maxmemory 0 (no limit) divides to +Inf and fires.
  const broken = rule();
  const memory = alerts(broken).find(a => a.alert === 'CmpOffloadRedisMemoryHigh')!;
  memory.expr = memory.expr.replace('(cmp_offload_redis_maxmemory_bytes > 0)', 'cmp_offload_redis_maxmemory_bytes');
  assert.notEqual(promtoolTest(broken, tests).status, 0, 'the unit tests pass without the no-limit guard');
});

test('promtool: every other alert is silent before its condition holds long enough, then fires once (skipped without promtool outside CI)', { skip: promtoolSkip }, () => {
  requirePromtool();
  const at = 'namespace="argocd",pod="repo-0"';
  const hpa = 'namespace="argocd",horizontalpodautoscaler="keda-hpa-cmp-offload-worker"';
  const warning = { severity: 'warning', namespace: 'argocd' };
  const tests = [
    {
      interval: '1m',
      input_series: [
        { series: `cmp_offload_queue_jobs{${at},queue="p",state="wait"}`, values: '25x40' },
        { series: `cmp_offload_stage_duration_seconds_bucket{${at},stage="queue_wait",le="10"}`, values: '0x40' },
        { series: `cmp_offload_stage_duration_seconds_bucket{${at},stage="queue_wait",le="60"}`, values: '0+10x40' },
        { series: `cmp_offload_stage_duration_seconds_bucket{${at},stage="queue_wait",le="+Inf"}`, values: '0+10x40' },
        { series: `kube_horizontalpodautoscaler_status_current_replicas{${hpa}}`, values: '10x40' },
        { series: `kube_horizontalpodautoscaler_spec_max_replicas{${hpa}}`, values: '10x40' },
        { series: `cmp_offload_requests_total{${at},rpc="generate",outcome="OK"}`, values: '0+90x40' },
        { series: `cmp_offload_requests_total{${at},rpc="generate",outcome="UNKNOWN"}`, values: '0+10x40' },
        { series: `cmp_offload_requests_total{${at},rpc="generate",outcome="DEADLINE_EXCEEDED"}`, values: '0+1x40' },
        { series: `cmp_offload_requests_total{${at},rpc="generate",outcome="ABORTED"}`, values: '0x5 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35' },
        { series: `cmp_offload_exec_timeouts_total{${at}}`, values: '0+1x40' },
        { series: `cmp_offload_jobs_total{${at},outcome="retried"}`, values: '0+1x40' },
        { series: `cmp_offload_keeper_errors_total{${at}}`, values: '0+1x40' },
        { series: `cmp_offload_cache_lookups_total{${at},result="miss"}`, values: '0+90x80' },
        { series: `cmp_offload_cache_lookups_total{${at},result="hit"}`, values: '0+10x80' },
      ],
      alert_rule_test: [
        ...quietThenFires('CmpOffloadQueueBacklog', '5m', '15m', { ...warning, queue: 'p' }, 'cmp-offload queue p holds 25 waiting jobs, more than the workers at their maximum run at once'),
        ...quietThenFires('CmpOffloadQueueWaitHigh', '5m', '25m', warning, 'p95 queue wait of cmp-offload jobs is 57.5s (repo-server\'s default deadline is 60s)'),
        ...quietThenFires('CmpOffloadWorkersAtMax', '10m', '20m', { severity: 'warning', namespace: 'argocd', horizontalpodautoscaler: 'keda-hpa-cmp-offload-worker' }, "cmp-offload workers have run at KEDA's maxReplicaCount for 15 minutes"),
        ...quietThenFires('CmpOffloadErrorRatioHigh', '5m', '25m', { ...warning, rpc: 'generate' }, '11.76% of cmp-offload generate requests end non-OK'),
        ...quietThenFires('CmpOffloadDeadlineExceeded', '5m', '25m', warning, "15 cmp-offload requests ran past the repo-server's deadline in 15 minutes"),
        ...quietThenFires('CmpOffloadJobsGivenUp', '8m', '25m', warning, '20 cmp-offload jobs were given up in 30 minutes after CMP_OFFLOAD_JOB_ATTEMPTS failed runs (jobGaveUp)'),
        ...quietThenFires('CmpOffloadExecTimeouts', '5m', '25m', warning, '25 cmp-offload plugin commands in 30 minutes ran past ARGOCD_EXEC_TIMEOUT or were SIGKILLed after the fatal timeout'),
        ...quietThenFires('CmpOffloadJobsFailing', '5m', '25m', { ...warning, outcome: 'retried' }, '15 cmp-offload jobs ended retried in 15 minutes'),
        ...quietThenFires('CmpOffloadKeeperFailing', '10m', '30m', warning, 'the cmp-offload keeper in namespace argocd failed 15 times in 15 minutes'),
        ...quietThenFires('CmpOffloadCacheHitRatioLow', '30m', '70m', { severity: 'info', namespace: 'argocd' }, 'cmp-offload cache hit ratio is 10%'),
      ],
    },
    {
      // One event each, never repeated: the alerts that used to page on it stay silent.
      interval: '1m',
      input_series: [
        { series: `cmp_offload_requests_total{${at},rpc="generate",outcome="ABORTED"}`, values: '0x5 1x40' },
        { series: `cmp_offload_exec_timeouts_total{${at}}`, values: '0x5 1x40' },
        { series: `cmp_offload_exec_kills_total{${at},reason="fatal_timeout"}`, values: '0x5 1x40' },
      ],
      alert_rule_test: ['6m', '10m', '20m', '30m'].flatMap(eval_time =>
        ['CmpOffloadJobsGivenUp', 'CmpOffloadExecTimeouts'].map(alertname => ({ eval_time, alertname, exp_alerts: [] })),
      ),
    },
  ];
  const res = promtoolTest(rule(), tests);
  assert.equal(res.status, 0, res.out);
  // The one-event case fails for a rule that pages on any increase without for: (as these were).
  const paging = rule();
  for (const a of alerts(paging).filter(x => ['CmpOffloadJobsGivenUp', 'CmpOffloadExecTimeouts'].includes(x.alert))) {
    a.expr = a.expr.replace(/> 1$|> 2$/gm, '> 0');
    delete a.for;
  }
  assert.notEqual(promtoolTest(paging, [tests[1]!]).status, 0, 'the one-event case passes for a rule that pages on one event');
});
