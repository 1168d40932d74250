/** What `node dist/bench/run.js` was asked to do. */
export type BenchCommand =
  | { kind: 'help' }
  | { kind: 'compare'; a: string; b?: string }
  | { kind: 'run'; quick: boolean; profile: boolean; write: boolean; only?: string[] };

export function usage(scenarios: readonly string[]): string {
  return `usage: npm run bench -- [--quick] [--only NAME,…] [--write] [--profile]
       node dist/bench/run.js --compare A [B]

Runs the scenarios and prints their table. A full run (no --quick, no --only) writes the table
between the bench markers of docs/performance.md and its record to bench/results.json (one per
commit, -dirty for a changed tree; a later run of the same replaces it). README.md is not touched.

  --quick        the short subset (smaller inputs, fewer repetitions)
  --only NAME,…  these scenarios only: ${scenarios.join(',')}
  --write        write the page and the record after a --quick or --only run too (without it
                 they write bench/out/results-partial.json only)
  --profile      CPU profiles of the processes started, in bench/out/profiles/
  --compare A B  print the rows of two records side by side with B − A, running nothing; A and B
                 are commits (a sha or a prefix of one, -dirty for the run of a changed tree) with a
                 record in bench/results.json, or .json files (a records file's latest record, or
                 the results of one run such as bench/out/results-partial.json)
  --compare A    the same, with B the latest record of bench/results.json
  --help         this text`;
}

/** Parse the arguments; throws a one-line message for anything it does not take. */
export function parseArgs(args: readonly string[], scenarios: readonly string[]): BenchCommand {
  if (args.includes('--help') || args.includes('-h')) return { kind: 'help' };
  const i = args.indexOf('--compare');
  if (i >= 0) {
    const names = args.slice(i + 1);
    if (i !== 0 || names.length < 1 || names.length > 2 || names.some(n => n.startsWith('-'))) {
      throw new Error('--compare takes one or two records (commits or .json files) and no other option');
    }
    return { kind: 'compare', a: names[0]!, ...(names[1] ? { b: names[1] } : {}) };
  }
  const out: BenchCommand = { kind: 'run', quick: false, profile: false, write: false };
  for (let j = 0; j < args.length; j++) {
    const a = args[j]!;
    if (a === '--quick') out.quick = true;
    else if (a === '--profile') out.profile = true;
    else if (a === '--write') out.write = true;
    else if (a === '--only' && args[j + 1] && !args[j + 1]!.startsWith('-')) {
      out.only = args[++j]!.split(',');
      const unknown = out.only.filter(n => !scenarios.includes(n));
      if (unknown.length) throw new Error(`no scenario ${unknown.join(', ')}; scenarios: ${scenarios.join(',')}`);
    } else throw new Error(`unknown argument ${a}`);
  }
  return out;
}
