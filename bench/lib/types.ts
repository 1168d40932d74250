/** How the runner calls a scenario. */
export interface BenchOptions {
  /** The one-minute subset: smaller inputs and fewer repetitions (each row says what it used). */
  quick: boolean;
  /** Scratch space for generated inputs (git-ignored); large inputs are cached here between runs. */
  outDir: string;
  /** Pass `--cpu-prof` to the proxy and worker processes a scenario starts; profiles land in `<outDir>/profiles`. */
  profile: boolean;
  /** Progress lines (stderr), so that a long run shows where it is. */
  log(line: string): void;
}

export type TargetOp = '<=' | '>=' | '<' | '==';

/** One line of the results table: a figure, the baseline it is measured against, and its target. */
export interface Row {
  /** Registry name of the scenario (e.g. `ingest`). */
  scenario: string;
  /** Which case of the scenario (e.g. `realistic 64 MiB, 1 KiB chunks`). */
  case: string;
  /** What cmp-offload did, in words and numbers. */
  measured: string;
  /** What the baseline did in the same run. */
  baseline: string;
  /** The figure the target is about. */
  value: number;
  /** Unit of `value` (`×`, `ms`, `MiB`, `s`, or empty). */
  unit: string;
  target: { op: TargetOp; value: number };
  met: boolean;
  /** Raw numbers for results.json. */
  details: Record<string, unknown>;
  /** Anything a reader must know to read the figure (e.g. a reduced size in --quick). */
  note?: string;
}

/** A scenario: a small module registered in `bench/scenarios/index.ts`. */
export interface Scenario {
  name: string;
  /** One line: what is compared with what. */
  title: string;
  run(opts: BenchOptions): Promise<Row[]>;
}

/** Build a row, deciding `met` from the value and the target. */
export function row(r: Omit<Row, 'met'>): Row {
  const { op, value } = r.target;
  const met = op === '<=' ? r.value <= value : op === '>=' ? r.value >= value : op === '<' ? r.value < value : r.value === value;
  return { ...r, met };
}
