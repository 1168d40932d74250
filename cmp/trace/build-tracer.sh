#!/bin/sh
# Compiles cmp-trace (the traced cache's read recorder) next to the compiled recorder module.
# Without a C compiler the build goes on: CMP_OFFLOAD_CACHE=traced then falls back to whole-tree
# keys (never a wrong hit), and counts them as traced fallbacks.
out=dist/cmp/trace/cmp-trace
mkdir -p "$(dirname "$out")"
if ! ${CC:-cc} -O2 -Wall -Wextra -o "$out" cmp/trace/cmp-trace.c; then
  echo "cmp-offload: could not compile cmp/trace/cmp-trace.c (install gcc): the traced cache will not record reads" >&2
fi
exit 0
