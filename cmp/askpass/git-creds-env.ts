import type { EnvEntry } from '../plugin/request.js';

/** Every env name Argo's repo-server sets for git credentials: never part of a cache key, never logged with values. */
export const GIT_CREDS_ENV: ReadonlySet<string> = new Set([
  'GIT_ASKPASS',
  'ARGOCD_GIT_ASKPASS_NONCE',
  'GIT_TERMINAL_PROMPT',
  'ARGOCD_BINARY_NAME',
  'ARGOCD_ASK_PASS_SOCK',
  'GIT_SSL_NO_VERIFY',
  'GIT_SSL_CERT',
  'GIT_SSL_KEY',
  'GIT_SSL_CAINFO',
  'ARGOCD_GIT_AUTH_HEADER',
  'ARGOCD_GIT_BEARER_AUTH_HEADER',
  'GIT_SSH_COMMAND',
  'SOCKS5_USER',
  'SOCKS5_PASSWD',
]);

/** Argo's default ARGOCD_ASK_PASS_SOCK (reposerver/askpass). */
export const DEFAULT_ASKPASS_SOCKET = '/tmp/reposerver-ask-pass.sock';

export interface GitCredsEnv {
  /** The effective ARGOCD_GIT_ASKPASS_NONCE (last entry wins), when non-empty. */
  nonce?: string;
  /** The effective ARGOCD_ASK_PASS_SOCK, else DEFAULT_ASKPASS_SOCKET. */
  socket: string;
  /** Distinct absolute file paths the env points to: GIT_SSL_CERT, GIT_SSL_KEY, GIT_SSL_CAINFO, and in GIT_SSH_COMMAND the argument of `-i` and the value of `UserKnownHostsFile=` (except /dev/null). In first-seen order. */
  files: string[];
}

/** Names whose whole value is a file path (temp files the repo-server wrote for the TLS client cert and CA). */
const FILE_ENV = new Set(['GIT_SSL_CERT', 'GIT_SSL_KEY', 'GIT_SSL_CAINFO']);
const SSH_COMMAND = 'GIT_SSH_COMMAND';

/** A file reference: absolute (a relative one means nothing outside the command's own directory) and not /dev/null. */
const isFileRef = (p: string) => p.startsWith('/') && p !== '/dev/null';

const KNOWN_HOSTS = 'userknownhostsfile=';

/** The shell's default IFS (space, tab, newline): git runs GIT_SSH_COMMAND with `sh -c`, which splits there. */
const isIfs = (c: number) => c === 32 || c === 9 || c === 10;

/** cmd[at, end) starts with `UserKnownHostsFile=`, in any case (ssh's option names are case-insensitive). */
const knownHostsAt = (cmd: string, at: number, end: number) =>
  end - at >= KNOWN_HOSTS.length && cmd.slice(at, at + KNOWN_HOSTS.length).toLowerCase() === KNOWN_HOSTS;

/**
 * The file paths in an ssh command line as Argo writes it (`ssh -i <key> -o UserKnownHostsFile=<file> …`,
 * joined with single spaces, paths unquoted), each given to `visit` as its span [start, end):
 * `-i <path>`, `-i<path>`, `-o UserKnownHostsFile=<path>` and `-oUserKnownHostsFile=<path>`.
 * One pass over the characters: linear in the value's length, whatever the value.
 */
function sshCommandPaths(cmd: string, visit: (start: number, end: number) => void): void {
  // What the previous token asks of this one: a key path (-i) or an option (-o).
  let expect: 'key' | 'option' | undefined;
  // isFileRef without copying the token out.
  const found = (start: number, end: number) => {
    if (cmd.charCodeAt(start) === 47 /* / */ && !(end - start === 9 && cmd.startsWith('/dev/null', start))) visit(start, end);
  };
  for (let i = 0; i < cmd.length; ) {
    while (i < cmd.length && isIfs(cmd.charCodeAt(i))) i++;
    if (i === cmd.length) break;
    const start = i;
    while (i < cmd.length && !isIfs(cmd.charCodeAt(i))) i++;
    const end = i;
    const was = expect;
    expect = undefined;
    const dash = cmd.charCodeAt(start) === 45; /* - */
    const flag = dash ? cmd.charCodeAt(start + 1) : -1;
    if (was === 'key') found(start, end);
    else if (was === 'option') {
      if (knownHostsAt(cmd, start, end)) found(start + KNOWN_HOSTS.length, end);
    } else if (flag === 105 /* i */) {
      if (end - start === 2) expect = 'key';
      else found(start + 2, end);
    } else if (flag === 111 /* o */) {
      if (end - start === 2) expect = 'option';
      else if (knownHostsAt(cmd, start + 2, end)) found(start + 2 + KNOWN_HOSTS.length, end);
    }
  }
}

/** The file paths one entry's value refers to (none for names that hold no path). */
function pathsOf(name: string, value: string): string[] {
  if (FILE_ENV.has(name)) return isFileRef(value) ? [value] : [];
  if (name === SSH_COMMAND) {
    const paths: string[] = [];
    sshCommandPaths(value, (start, end) => paths.push(value.slice(start, end)));
    return paths;
  }
  return [];
}

/** undefined when the env carries neither a nonce nor a file reference (nothing to relay). */
export function gitCredsOf(env: readonly EnvEntry[], defaultSocket = DEFAULT_ASKPASS_SOCKET): GitCredsEnv | undefined {
  // The last entry of each name is the one the command sees (Go's dedupEnv, cmp/exec/env.ts).
  const lastAt = new Map<string, number>();
  env.forEach((e, i) => {
    if (GIT_CREDS_ENV.has(e.name)) lastAt.set(e.name, i);
  });
  const value = (name: string) => env[lastAt.get(name) ?? -1]?.value;
  const files = new Set<string>();
  env.forEach((e, i) => {
    if (lastAt.get(e.name) === i) for (const p of pathsOf(e.name, e.value)) files.add(p);
  });
  const nonce = value('ARGOCD_GIT_ASKPASS_NONCE') || undefined;
  if (nonce === undefined && files.size === 0) return undefined;
  return { ...(nonce !== undefined ? { nonce } : {}), socket: value('ARGOCD_ASK_PASS_SOCK') || defaultSocket, files: [...files] };
}

/**
 * The env with ARGOCD_ASK_PASS_SOCK set to `to.socket` (when given) and each file path of
 * `to.files` (original → copy) replaced where gitCredsOf found it (every entry of those names,
 * order and all other entries unchanged). With no ARGOCD_ASK_PASS_SOCK entry (Argo's default
 * socket), one is appended. A copy with whitespace cannot stand in GIT_SSH_COMMAND, which the
 * shell splits at whitespace: that throws.
 */
export function rewriteGitCredsEnv(env: readonly EnvEntry[], to: { socket?: string; files: ReadonlyMap<string, string> }): EnvEntry[] {
  let socketSet = false;
  const out = env.map(({ name, value }): EnvEntry => {
    if (name === 'ARGOCD_ASK_PASS_SOCK' && to.socket !== undefined) {
      socketSet = true;
      return { name, value: to.socket };
    }
    if (FILE_ENV.has(name)) return { name, value: (isFileRef(value) && to.files.get(value)) || value };
    if (name === SSH_COMMAND) return { name, value: rewriteSshCommand(value, to.files) };
    return { name, value };
  });
  if (to.socket !== undefined && !socketSet) out.push({ name: 'ARGOCD_ASK_PASS_SOCK', value: to.socket });
  return out;
}

function rewriteSshCommand(cmd: string, files: ReadonlyMap<string, string>): string {
  const parts: string[] = [];
  let at = 0;
  sshCommandPaths(cmd, (start, end) => {
    const copy = files.get(cmd.slice(start, end));
    if (copy === undefined) return;
    if (/[ \t\n]/.test(copy)) throw new Error(`cannot put ${JSON.stringify(copy)} in GIT_SSH_COMMAND: the path has whitespace`);
    parts.push(cmd.slice(at, start), copy);
    at = end;
  });
  parts.push(cmd.slice(at));
  return parts.join('');
}
