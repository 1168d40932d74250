/**
 * The read recorder as it runs where the kernel or the seccomp profile lacks what it prefers:
 * `kcmp` fails with EPERM (containerd's and Docker's default profiles without CAP_SYS_PTRACE),
 * and a filter asking for SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV fails with EINVAL (Linux before
 * 5.19). A small C wrapper installs a seccomp filter that says so, then execs the built tracer;
 * a script naming both is what `CMP_OFFLOAD_TRACER` takes. Its fallbacks (kcmp: the parent's
 * /proc task syscalls; not killable: the calls that could run twice continue in the kernel)
 * then run under the same suites as the preferred paths.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BUILT_TRACER } from '../../cmp/trace/read-recorder.js';

const DEGRADE_C = `#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifndef SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
#define SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (1UL << 5)
#endif
int main(int argc, char **argv) {
  if (argc < 2) return 2;
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_kcmp, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_seccomp, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof f / sizeof f[0], f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)) return perror("degrade: seccomp"), 2;
  execv(argv[1], argv + 1);
  perror("degrade: exec");
  return 127;
}
`;

export interface DegradedTracer {
  /** `degrade PROGRAM ARG...`: runs PROGRAM under the filter. */
  wrapper: string;
  /** The tracer under the filter, for CMP_OFFLOAD_TRACER. */
  tracer: string;
}

/** Build both into a fresh dir (removed at exit), readable by a runner of another uid. */
export function buildDegradedTracer(): DegradedTracer {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-degraded-'));
  fs.chmodSync(dir, 0o755);
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  const wrapper = path.join(dir, 'degrade');
  fs.writeFileSync(`${wrapper}.c`, DEGRADE_C);
  execFileSync(process.env.CC ?? 'cc', ['-O2', '-o', wrapper, `${wrapper}.c`], { stdio: 'pipe' });
  const tracer = path.join(dir, 'cmp-trace');
  fs.writeFileSync(tracer, `#!/bin/sh\nexec ${JSON.stringify(wrapper)} ${JSON.stringify(BUILT_TRACER)} "$@"\n`, { mode: 0o755 });
  return { wrapper, tracer };
}
