import path from 'node:path';

/**
 * What a traced run touched, as absolute paths: every path handed to a file syscall (opened,
 * stat'ed, probed, executed, created, removed, renamed) and every directory whose entries were
 * read. `incomplete` names the first reason the record cannot be trusted; then nothing else
 * in it may be used.
 */
export interface RawReads {
  touched: Set<string>;
  listed: Set<string>;
  /** Sources of renames: a renamed directory hides which of its files were read later. */
  moved: Set<string>;
  /** Paths a lookup only passed (a directory left with `..`, a symlink crossed): their type counts. */
  traversed: Set<string>;
  incomplete: string | undefined;
}

/** The trace format this reader takes (cmp-trace.c's first line): paths the tracer resolved itself. */
const FORMAT = 'V 2';

/**
 * Reader of cmp-trace's output (see cmp-trace.c): `V 2` first, then `T|L|M|P <hex path>` records
 * (absolute paths the tracer resolved as the kernel did: no `.`, `..` or symlink aliases left),
 * `X <reason>`, and `E` once every tracee is gone. Feed it lines in order, then call `finish()`. `maxPaths`
 * bounds memory: beyond it the record is incomplete.
 */
export class TraceRecords {
  private readonly out: RawReads = { touched: new Set(), listed: new Set(), moved: new Set(), traversed: new Set(), incomplete: undefined };
  private ended = false;
  private started = false;

  constructor(private readonly maxPaths: number) {}

  line(raw: string): void {
    if (this.out.incomplete) return;
    if (!this.started) {
      this.started = true;
      if (raw !== FORMAT) this.fail(`a trace from another cmp-trace version (${JSON.stringify(raw.slice(0, 16))}, expected ${JSON.stringify(FORMAT)})`);
      return;
    }
    if (this.ended) return this.fail('records after the end');
    const kind = raw.slice(0, 2);
    const arg = raw.slice(2);
    if (raw === 'E') {
      this.ended = true;
      return;
    }
    if (kind === 'X ') return this.fail(arg);
    if (!/^(?:[0-9a-f]{2})+$/.test(arg)) return this.fail('unparsed trace line');
    const abs = Buffer.from(arg, 'hex').toString('utf8');
    // Normalizing here would be wrong (`..` after a symlink): the tracer already resolved it.
    if (path.posix.resolve(abs) !== abs) return this.fail('a recorded path that is not resolved');
    if (kind === 'T ' || kind === 'M ') {
      this.out.touched.add(abs);
      if (kind === 'M ') this.out.moved.add(abs);
    } else if (kind === 'L ') this.out.listed.add(abs);
    else if (kind === 'P ') this.out.traversed.add(abs);
    else return this.fail('unparsed trace line');
    if (this.out.touched.size + this.out.listed.size + this.out.traversed.size > this.maxPaths) this.fail(`more than ${this.maxPaths} paths`);
  }

  /** The record; a trace without its end (the tracer was killed) is incomplete. */
  finish(): RawReads {
    if (!this.ended) this.fail('the tracer did not finish');
    return this.out;
  }

  private fail(reason: string): void {
    this.out.incomplete ??= reason;
  }
}
