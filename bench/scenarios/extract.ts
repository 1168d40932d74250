import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { extractTgz } from '../../cmp/tar/extract.js';
import { fmt, median, timed } from '../lib/stats.js';
import { treeTarball } from '../lib/tarballs.js';
import { row, type Scenario } from '../lib/types.js';

const run = promisify(execFile);
const GiB = 1024 ** 3;

export const extract: Scenario = {
  name: 'extract',
  title: "worker extraction (Argo's Untgz rules, worker thread) vs GNU tar -xzf of the same 20k-file tarball",
  async run(opts) {
    const t = await treeTarball(opts.outDir, 'extract-20k', 20_000, 2048);
    const dest = (who: string, i: number) => path.join(opts.outDir, `extract-${who}-${i}`);
    const ours = async (i: number) => {
      fs.mkdirSync(dest('ours', i));
      return (await timed(() => extractTgz(t.path, dest('ours', i), { preserveFileMode: false, maxExtractedBytes: 8 * GiB, maxEntries: 500_000 }))).ms;
    };
    const tar = async (i: number) => {
      fs.mkdirSync(dest('tar', i));
      return (await timed(() => run('tar', ['-xzf', t.path, '-C', dest('tar', i)]))).ms;
    };
    const clean = () => {
      for (const d of fs.readdirSync(opts.outDir)) if (/^extract-(ours|tar)-/.test(d)) fs.rmSync(path.join(opts.outDir, d), { recursive: true, force: true });
    };
    clean();
    const o: number[] = [];
    const g: number[] = [];
    try {
      // Warm-up: the worker thread starts once per process, and the page cache holds the tarball.
      await ours(0);
      await tar(0);
      clean();
      for (let i = 1; i <= (opts.quick ? 2 : 4); i++) {
        g.push(await tar(i));
        o.push(await ours(i));
        clean();
      }
    } finally {
      clean();
    }
    const oursMs = median(o);
    const tarMs = median(g);
    opts.log(`extract: ours ${o.map(x => x.toFixed(0)).join('/')} ms, tar ${g.map(x => x.toFixed(0)).join('/')} ms`);
    return [
      row({
        scenario: 'extract',
        case: `${t.files} files, ${fmt.mib(t.rawBytes)} in a ${fmt.mib(t.size)} tarball`,
        measured: fmt.ms(oursMs),
        baseline: `GNU tar ${fmt.ms(tarMs)}`,
        value: oursMs / tarMs,
        unit: '×',
        target: { op: '<=', value: 1.5 },
        details: { oursMs: o, tarMs: g, files: t.files, rawBytes: t.rawBytes },
        note: opts.quick ? 'quick: median of 2' : 'median of 4',
      }),
    ];
  },
};
