#!/bin/sh
# Compiles cmp-reap (cmp/exec/cmp-reap.c), which lets the server kill every process a plugin
# command starts, including those that leave its process group, next to the compiled
# run-command module. Statically linked when the C library allows it (the helper then loads
# nothing a plugin's env could name, e.g. LD_PRELOAD). Without a C compiler the build goes on:
# commands then run as before under process-group kills only, and the server says so once.
out=dist/cmp/exec/cmp-reap
mkdir -p "$(dirname "$out")"
flags="-O2 -Wall -Wextra"
if ! ${CC:-cc} $flags -static -o "$out" cmp/exec/cmp-reap.c 2>/dev/null && ! ${CC:-cc} $flags -o "$out" cmp/exec/cmp-reap.c; then
  rm -f "$out"
  echo "cmp-offload: could not compile cmp/exec/cmp-reap.c (install gcc): plugin processes that leave their process group will not be killed" >&2
fi
# no-dump.node (cmp/exec/no-dump.c): keeps same-uid plugin commands out of the standalone proxy's memory.
nodump=dist/cmp/exec/no-dump.node
if ! ${CC:-cc} $flags -shared -fPIC -o "$nodump" cmp/exec/no-dump.c; then
  rm -f "$nodump"
  echo "cmp-offload: could not compile cmp/exec/no-dump.c (install gcc): a standalone proxy's memory stays readable by its plugin commands where the kernel allows same-uid tracing" >&2
fi
exit 0
