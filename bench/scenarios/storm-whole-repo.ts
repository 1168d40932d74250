import { fmt } from '../lib/stats.js';
import { row, type Scenario } from '../lib/types.js';
import { BASE_EDIT, storm, STORM_LINKS, type CacheMode, type Pass, type Storm } from '../lib/whole-repo-storm.js';

export const stormWholeRepo: Scenario = {
  name: 'storm-whole-repo',
  title: 'monorepo storm, whole repo sent per app (Argo default): CMP_OFFLOAD_CACHE=traced vs on (content cache) vs off',
  async run(opts) {
    // Every request carries the whole repo, so a pass costs apps × repo size: 100 apps keep the full run to about a minute.
    const apps = opts.quick ? 20 : 100;
    const readBase = BASE_EDIT.readers(apps).length;
    const result: Partial<Record<CacheMode, Storm>> = {};
    for (const mode of ['traced', 'on', 'off'] as const) {
      const s = await storm(mode, apps);
      result[mode] = s;
      if (s.cold) opts.log(`  ${mode}: job stages of the cold pass (ms, summed): ${JSON.stringify(s.cold.stagesMs)}`);
      opts.log(
        `  ${mode}: cold ${s.cold ? `${s.cold.runs} runs ${s.cold.ms} ms` : '-'}; one app changed ${s.appChanged.runs} runs ${s.appChanged.ms} ms; ` +
          `base changed ${s.baseChanged.runs} runs ${s.baseChanged.ms} ms`,
      );
    }
    const { traced, on, off } = result as Record<CacheMode, Storm>;
    // The same storm over a tree holding symlinks: the traced cache keeps its per-app records.
    const linked = await storm('traced', apps, { links: STORM_LINKS });
    opts.log(`  traced, with symlinks: one app changed ${linked.appChanged.runs} runs ${linked.appChanged.ms} ms; base changed ${linked.baseChanged.runs} runs`);
    const versus = (pick: (s: Storm) => Pass) =>
      `content cache: ${pick(on).runs} executions, ${fmt.s(pick(on).ms)}; off: ${pick(off).runs}, ${fmt.s(pick(off).ms)}`;
    const common = `${apps} apps, 1 proxy + 2 workers, 10 refreshes at a time, kustomize-like sh plugin`;
    return [
      row({
        scenario: 'storm-whole-repo',
        case: `${common}; one app's file changed`,
        measured: `traced: ${traced.appChanged.runs} execution(s), ${fmt.s(traced.appChanged.ms)}`,
        baseline: versus(s => s.appChanged),
        value: traced.appChanged.runs,
        unit: '',
        target: { op: '==', value: 1 },
        details: { apps, traced, on, off },
        note: `${(off.appChanged.ms / traced.appChanged.ms).toFixed(1)}× faster than off`,
      }),
      row({
        scenario: 'storm-whole-repo',
        case: `${common}; base/ changed (read by ${readBase} apps)`,
        measured: `traced: ${traced.baseChanged.runs} execution(s), ${fmt.s(traced.baseChanged.ms)}`,
        baseline: versus(s => s.baseChanged),
        value: traced.baseChanged.runs,
        unit: '',
        target: { op: '==', value: readBase },
        details: {},
      }),
      row({
        scenario: 'storm-whole-repo',
        case: `${common}; the tree holds ${Object.keys(STORM_LINKS).length} symlinks; one app's file changed`,
        measured: `traced: ${linked.appChanged.runs} execution(s), ${fmt.s(linked.appChanged.ms)}`,
        baseline: `without symlinks: ${traced.appChanged.runs} execution(s), ${fmt.s(traced.appChanged.ms)}`,
        value: linked.appChanged.runs,
        unit: '',
        target: { op: '==', value: 1 },
        details: { linked },
        note: `base/ changed: ${linked.baseChanged.runs} executions (${readBase} apps read it)`,
      }),
    ];
  },
};
