#!/bin/sh
# Fails if libnexar exports a dynamic symbol not starting with nexar_, if a
# function declared in nexar.h is not exported, or if the SONAME is wrong.
set -eu
lib="$1"
header="$(dirname "$0")/../../include/nexar.h"
syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | grep -v '^$' | sort -u)
bad=$(printf '%s\n' "$syms" | grep -v '^nexar_' | grep -v '^NEXAR_0$' || true)
if [ -n "$bad" ]; then
  echo "non-nexar symbols exported by $lib:"; printf '%s\n' "$bad"; exit 1
fi
declared=$(tr '\n' ' ' < "$header" | grep -o 'NEXAR_API[^;(]*(' | grep -o 'nexar_[a-z0-9_]*($' | tr -d '(' | sort -u)
for f in $declared; do
  printf '%s\n' "$syms" | grep -qx "$f" || { echo "declared in nexar.h but not exported: $f"; exit 1; }
done
soname=$(objdump -p "$lib" | awk '/SONAME/{print $2}')
[ "$soname" = "libnexar.so.0" ] || { echo "SONAME is '$soname'"; exit 1; }
echo "ok: $(printf '%s\n' "$declared" | wc -l) declared functions exported, nothing else; SONAME $soname"
