/*
 * no-dump.node: a Node-API module whose one effect is prctl(PR_SET_DUMPABLE, 0) on the process
 * that loads it (cmp/exec/no-dump.ts). A standalone proxy runs plugin commands as its own uid;
 * a dumpable process of that uid can be read and written by them through /proc/<pid>/mem,
 * /proc/<pid>/environ, ptrace and process_vm_readv wherever the kernel lets a process trace
 * another of its uid (Yama ptrace_scope 0), and its cache holds other tenants' manifests. A
 * non-dumpable process can only be traced with CAP_SYS_PTRACE. Node cannot call prctl, hence
 * this module; the flag is reset by execve, so plugin commands (and cmp-reap, which sets it on
 * itself) are unaffected.
 *
 * No Node headers are needed: the module only exports the entry point Node looks up, and hands
 * back the exports object it is given.
 */
#include <sys/prctl.h>

typedef struct napi_env__ *napi_env;
typedef struct napi_value__ *napi_value;

__attribute__((visibility("default"))) napi_value napi_register_module_v1(napi_env env, napi_value exports) {
  (void)env;
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  return exports;
}
