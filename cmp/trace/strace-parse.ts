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
  incomplete: string | undefined;
}

/** Syscalls whose use makes a run's reads unattributable (aliases, handles, async I/O rings). */
const UNTRACKABLE = new Set(['symlink', 'symlinkat', 'io_uring_setup', 'open_by_handle_at', 'mount', 'pivot_root', 'chroot', 'fsmount', 'open_tree', 'move_mount']);
const RENAMES = new Set(['rename', 'renameat', 'renameat2']);
const CLONES = new Set(['clone', 'clone3', 'fork', 'vfork']);
/** Paths that alias a directory of another process or an open file descriptor. */
const ALIAS = /^\/(proc\/[^/]+\/(task\/[^/]+\/)?(cwd|root|fd|map_files)\/.|dev\/fd\/.)/;

interface Cwd {
  path: string;
}

interface Proc {
  cwd: Cwd | undefined;
  /** Relative paths used before the process's cwd was known (its clone line comes later). */
  queued: Array<{ kind: 'use' | 'chdir'; rel: string }>;
}

/**
 * Incremental parser of `strace -f -qq -y -xx -s 0` output (every string and fd path
 * hex-escaped, so quotes and brackets in names cannot confuse it). Feed it lines in order
 * with `line()`, then call `finish()`. Relative paths are resolved against the calling
 * process's cwd, which is followed through chdir/fchdir, inherited through clone/fork
 * (shared with CLONE_FS) and re-read from every `AT_FDCWD</cwd>` annotation. `maxPaths`
 * bounds memory: beyond it the record is incomplete.
 */
export class StraceParser {
  private readonly procs = new Map<number, Proc>();
  private readonly pending = new Map<number, string>();
  private readonly out: RawReads = { touched: new Set(), listed: new Set(), moved: new Set(), incomplete: undefined };

  constructor(
    private readonly rootCwd: string,
    private readonly maxPaths: number,
  ) {}

  line(raw: string): void {
    if (this.out.incomplete) return;
    const m = /^(\d+) +(.*)$/.exec(raw);
    if (!m) {
      if (raw.trim() !== '') this.fail(`unparsed trace line`);
      return;
    }
    const pid = Number(m[1]);
    let rest = m[2]!;
    if (rest.startsWith('+++') || rest.startsWith('---')) return;
    const resumed = /^<\.\.\. ([a-z0-9_]+) resumed>(.*)$/.exec(rest);
    if (resumed) {
      const head = this.pending.get(pid);
      this.pending.delete(pid);
      if (head === undefined) return this.fail(`resumed ${resumed[1]} without its start`);
      rest = head + resumed[2]!;
    } else if (rest.endsWith('<unfinished ...>')) {
      this.pending.set(pid, rest.slice(0, -'<unfinished ...>'.length).trimEnd());
      return;
    }
    this.call(pid, rest);
  }

  /** The record; processes still waiting for their cwd or unfinished calls make it incomplete. */
  finish(): RawReads {
    if (!this.out.incomplete) {
      // A call interrupted by the process's death still named its paths.
      for (const [pid, head] of this.pending) this.call(pid, `${head}) = ?`);
      for (const proc of this.procs.values()) {
        if (proc.queued.length > 0) this.fail('a process whose working directory is unknown used relative paths');
      }
    }
    return this.out;
  }

  private fail(reason: string): void {
    this.out.incomplete ??= reason;
  }

  private proc(pid: number): Proc {
    let p = this.procs.get(pid);
    if (!p) {
      // The first process is the one strace started: its cwd is the command's.
      p = { cwd: this.procs.size === 0 ? { path: this.rootCwd } : undefined, queued: [] };
      this.procs.set(pid, p);
    }
    return p;
  }

  private call(pid: number, text: string): void {
    const open = text.indexOf('(');
    if (open <= 0) return this.fail('unparsed syscall');
    const name = text.slice(0, open);
    const parsed = splitArgs(text, open + 1);
    if (!parsed) return this.fail(`unparsed arguments of ${name}`);
    const { args, ret } = parsed;
    const proc = this.proc(pid);
    if (UNTRACKABLE.has(name)) return this.fail(`the plugin called ${name}`);

    if (CLONES.has(name)) {
      const child = Number(ret);
      if (!Number.isInteger(child) || child <= 0) return;
      const shared = name === 'clone' || name === 'clone3' ? /CLONE_FS/.test(args.join(',')) : false;
      const c = this.proc(child);
      const cwd = proc.cwd === undefined ? undefined : shared ? proc.cwd : { path: proc.cwd.path };
      if (cwd === undefined) return this.fail('a process was cloned before its parent\'s cwd was known');
      if (c.cwd === undefined) this.settle(c, cwd);
      return;
    }
    if (name === 'getdents64' || name === 'getdents') {
      const fd = fdPath(args[0]);
      if (fd === undefined) return this.fail(`${name} on a descriptor without a path`);
      if (fd.startsWith('/')) this.listed(fd);
      return;
    }
    if (name === 'fchdir') {
      const fd = fdPath(args[0]);
      if (ret === '0') {
        if (fd === undefined || !fd.startsWith('/')) return this.fail('fchdir to a descriptor without a path');
        this.setCwd(proc, fd);
      }
      return;
    }

    const atCall = isAtCall(name);
    for (let i = 0; i < args.length; i++) {
      const arg = args[i]!;
      const annotated = fdPath(arg);
      if (annotated !== undefined && arg.startsWith('AT_FDCWD')) this.setCwd(proc, annotated);
      if (!arg.startsWith('"')) continue;
      // Path arguments are printed whole; a cut string is an output buffer (readlink's, xattr values).
      if (arg.endsWith('...')) continue;
      const p = decodeString(arg);
      if (p === undefined) return this.fail(`truncated or malformed path in ${name}`);
      if (p === '') continue; // AT_EMPTY_PATH: the fd itself, already known
      let abs: string | undefined;
      if (p.startsWith('/')) abs = path.posix.resolve(p);
      else {
        const dirfd = atCall && i > 0 ? fdPath(args[i - 1]!) : undefined;
        if (dirfd !== undefined) {
          if (!dirfd.startsWith('/')) return this.fail(`${name} relative to a descriptor without a path`);
          abs = path.posix.resolve(dirfd, p);
        } else if (proc.cwd === undefined) {
          proc.queued.push({ kind: name === 'chdir' && ret === '0' ? 'chdir' : 'use', rel: p });
          continue;
        } else abs = path.posix.resolve(proc.cwd.path, p);
      }
      if (ALIAS.test(abs)) return this.fail(`a path through ${abs.split('/').slice(0, 4).join('/')}`);
      this.touch(abs);
      if (RENAMES.has(name) && i <= 1) this.out.moved.add(abs);
      if (name === 'chdir' && ret === '0') this.setCwd(proc, abs);
    }
  }

  private setCwd(proc: Proc, cwd: string): void {
    if (proc.cwd === undefined) this.settle(proc, { path: cwd });
    else proc.cwd.path = cwd;
  }

  /** The cwd of a process became known: resolve what it did before, in order. */
  private settle(proc: Proc, cwd: Cwd): void {
    proc.cwd = cwd;
    for (const q of proc.queued.splice(0)) {
      const abs = path.posix.resolve(cwd.path, q.rel);
      this.touch(abs);
      if (q.kind === 'chdir') cwd.path = abs;
    }
  }

  private touch(abs: string): void {
    this.out.touched.add(abs);
    if (this.out.touched.size + this.out.listed.size > this.maxPaths) this.fail(`more than ${this.maxPaths} paths`);
  }

  private listed(abs: string): void {
    this.out.listed.add(abs);
    if (this.out.touched.size + this.out.listed.size > this.maxPaths) this.fail(`more than ${this.maxPaths} paths`);
  }
}

/** *at syscalls: a string argument right after a descriptor argument is relative to it. */
function isAtCall(name: string): boolean {
  return name.endsWith('at') || name.endsWith('at2') || name === 'statx' || name === 'openat2' || name === 'execveat' || name === 'name_to_handle_at';
}

/**
 * Split `args) = ret ...` at top-level commas (quotes, brackets and `<fd path>` annotations
 * nest). Returns the raw argument texts and the return value's first word.
 */
function splitArgs(text: string, start: number): { args: string[]; ret: string } | undefined {
  const args: string[] = [];
  let depth = 0;
  let from = start;
  for (let i = start; i < text.length; i++) {
    const c = text[i]!;
    if (c === '"') {
      const end = text.indexOf('"', i + 1);
      if (end < 0) return undefined;
      i = end;
    } else if (c === '<' && /[0-9D]/.test(text[i - 1] ?? '')) {
      // A `-y` annotation: hex-escaped or a plain `type:[inode]`, never containing `>`.
      const end = text.indexOf('>', i + 1);
      if (end < 0) return undefined;
      i = end;
    } else if (c === '(' || c === '[' || c === '{') depth++;
    else if (c === ']' || c === '}') depth--;
    else if (c === ')') {
      if (depth > 0) depth--;
      else {
        const last = text.slice(from, i).trim();
        if (last !== '' || args.length > 0) args.push(last);
        const m = /^\s*=\s*(\S+)/.exec(text.slice(i + 1));
        return { args, ret: m ? m[1]! : '?' };
      }
    } else if (c === ',' && depth === 0) {
      args.push(text.slice(from, i).trim());
      from = i + 1;
    }
  }
  return undefined;
}

/** The path of a `-y` annotated descriptor (`3</a/b>`, `AT_FDCWD</a>`), or undefined. */
function fdPath(arg: string | undefined): string | undefined {
  if (arg === undefined) return undefined;
  const m = /^(?:-?\d+|AT_FDCWD)<(.*)>$/.exec(arg);
  return m ? hexDecode(m[1]!) : undefined;
}

/** A complete `-xx` string argument; undefined if not all hex. */
function decodeString(arg: string): string | undefined {
  const m = /^"((?:\\x[0-9a-f]{2})*)"$/.exec(arg);
  return m ? hexDecode(m[1]!) : undefined;
}

function hexDecode(s: string): string | undefined {
  if (!/^(\\x[0-9a-f]{2})*$/.test(s)) {
    // Descriptor annotations of non-files (`pipe:[123]`, `anon_inode:...`) are not hex-escaped.
    return /^[^/]/.test(s) ? s : undefined;
  }
  const bytes = Buffer.alloc(s.length / 4);
  for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(s.slice(i * 4 + 2, i * 4 + 4), 16);
  return bytes.toString('utf8');
}
