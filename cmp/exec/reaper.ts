import { fileURLToPath } from 'node:url';
import { runProbeCommand } from './probe-command.js';

/** cmp-reap as `npm run build` compiles it (cmp/exec/build-reaper.sh), next to this module. */
export const BUILT_REAPER = fileURLToPath(new URL('./cmp-reap', import.meta.url));

let probe: Promise<string | undefined> | undefined;

/**
 * The cmp-reap binary to run plugin commands under, or undefined when it is missing or cannot
 * work here (asked once per process). Without it commands run as before: their process group is
 * signalled, and a process that leaves the group escapes; this is said once, on stderr.
 */
export function usableReaper(): Promise<string | undefined> {
  probe ??= runProbeCommand(BUILT_REAPER, ['--probe'], { env: {}, timeoutMs: 10_000 }).then(failed => {
    if (!failed) return BUILT_REAPER;
    process.emitWarning(
      `cmp-reap is not usable (${failed.text}): plugin commands run under process-group kills only, and a process that ` +
        'leaves its group (setsid, a double fork) survives timeouts, cancellation and the end of its request. ' +
        'A standalone proxy therefore stores no answer (a survivor could tamper with any later run). Build with a C compiler (cc) to fix this.',
      { code: 'CMP_REAP_UNUSABLE' },
    );
    return undefined;
  });
  return probe;
}
