import { Status } from '../cmp/grpc-status.js';
import { formatGoDuration } from '../cmp/go/go-duration.js';
import { messageOf, ourError } from '../cmp/errors.js';
import { AskpassError } from '../cmp/askpass/askpass-error.js';
import { gitCredsOf } from '../cmp/askpass/git-creds-env.js';
import type { EnvEntry, GitCredsSource } from '../cmp/plugin/request.js';
import { lookUp, type LookupDeps } from '../cmp/queue/git-creds-relay.js';

/** How long one lookup waits for the proxy's answer, within the job's deadline. */
export const LOOKUP_TIMEOUT_MS = 10_000;
/** Lookups of one job at once, and in all (the proxy's own bound): plugin code looping on askpass stops there. */
const MAX_CONCURRENT_LOOKUPS = 4;
const MAX_LOOKUPS = 256;

/**
 * The git credentials of a job whose request carries them (provideGitCreds), relayed by the proxy
 * that submitted it: the files the env points to are fetched now (the run needs them before its
 * first command), the askpass answers each time git asks. A lookup nobody answers fails with
 * `gitCredsUnanswered`: for the files, as the job's error; for askpass, as the status git's helper
 * prints. Redis errors are thrown as they are (infrastructure: the job is retried).
 */
export async function relayedGitCreds(deps: LookupDeps, jobId: string, env: readonly EnvEntry[], deadline: number, signal: AbortSignal): Promise<GitCredsSource | undefined> {
  const creds = gitCredsOf(env);
  if (!creds) return undefined;
  const budget = () => Math.max(0, Math.min(LOOKUP_TIMEOUT_MS, deadline - Date.now()));
  const files = new Map<string, Buffer>();
  if (creds.files.length > 0) {
    const waited = budget();
    const a = await lookUp(deps, jobId, 'files', waited, signal);
    if (signal.aborted) throw signal.reason;
    if (!a) throw ourError('gitCredsUnanswered', jobId, formatGoDuration(waited));
    if (!a.ok) throw ourError('gitCredsFiles', a.message);
    if (!('files' in a)) throw ourError('gitCredsFiles', 'the answer holds no files');
    for (const [file, data] of a.files) if (creds.files.includes(file)) files.set(file, Buffer.from(data, 'base64'));
    const missing = creds.files.filter(f => !files.has(f));
    if (missing.length > 0) throw ourError('gitCredsFiles', `the answer lacks ${missing.join(', ')}`);
  }
  let running = 0;
  let made = 0;
  return {
    ...(creds.nonce !== undefined ? { nonce: creds.nonce } : {}),
    files,
    async credentials() {
      if (running >= MAX_CONCURRENT_LOOKUPS || made >= MAX_LOOKUPS) {
        throw new AskpassError(Status.RESOURCE_EXHAUSTED, `cmp-offload: too many git credential lookups (at most ${MAX_CONCURRENT_LOOKUPS} at once, ${MAX_LOOKUPS} per job)`);
      }
      running++;
      made++;
      try {
        const waited = budget();
        const a = await lookUp(deps, jobId, 'credentials', waited, signal).catch((err: unknown) => {
          throw new AskpassError(Status.UNAVAILABLE, `cmp-offload: the git credentials lookup failed: ${messageOf(err)}`);
        });
        if (!a) throw new AskpassError(Status.UNAVAILABLE, ourError('gitCredsUnanswered', jobId, formatGoDuration(waited)).message);
        if (!a.ok) throw new AskpassError(a.code, a.message);
        if (!('username' in a)) throw new AskpassError(Status.INTERNAL, 'cmp-offload: the git credentials answer holds no credentials');
        return { username: a.username, password: a.password };
      } finally {
        running--;
      }
    },
  };
}
