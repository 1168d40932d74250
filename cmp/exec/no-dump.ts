import { statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** no-dump.node as `npm run build` compiles it (cmp/exec/build-reaper.sh), next to this module. */
export const BUILT_NO_DUMP = fileURLToPath(new URL('./no-dump.node', import.meta.url));

/**
 * Make this process non-dumpable (cmp/exec/no-dump.c): plugin commands of the same uid can then
 * neither read nor change its memory, env or open files through /proc or ptrace. Returns why it
 * could not, or undefined once it holds: the kernel then gives the files of /proc/<pid> to root,
 * which is what is checked (a process of uid 0 cannot tell, and needs no check: its plugins are
 * root too).
 */
export function becomeNonDumpable(module = BUILT_NO_DUMP): string | undefined {
  try {
    process.dlopen({ exports: {} }, module);
  } catch (err) {
    return `${BUILT_NO_DUMP} could not be loaded (${(err as Error).message.split('\n')[0]})`;
  }
  try {
    if (process.getuid?.() !== 0 && statSync(`/proc/${process.pid}/environ`).uid !== 0) return 'prctl(PR_SET_DUMPABLE, 0) did not hold';
  } catch {
    // no /proc to check against
  }
  return undefined;
}
