/*
 * cmp-undumpable.so: preloaded into the runner's node process by `cmp-reap --init` (cmp-reap.c).
 * Plugin code runs with the runner's uid; a dumpable runner could be ptraced, its memory read
 * through /proc/<pid>/mem, or its fds taken with pidfd_getfd, which would hand a run the next
 * runs' requests. Node cannot call prctl, hence this constructor: it makes the process
 * non-dumpable before node starts, and removes LD_PRELOAD from the environment so that neither
 * node's process.env nor the commands it spawns carry it (each of them is dumpable again after
 * its own execve, as usual).
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/prctl.h>

__attribute__((constructor)) static void undumpable(void) {
  prctl(PR_SET_DUMPABLE, 0);
  unsetenv("LD_PRELOAD");
}
