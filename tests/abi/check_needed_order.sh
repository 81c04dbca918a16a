#!/bin/sh
# Fails if libnexar needs libmimalloc ahead of libstdc++. The loader binds
# operator new/delete to the first library in load order that defines them;
# libmimalloc defines them too, so a C, Rust or Go program (which does not
# itself link libstdc++) would get mimalloc's new and delete for libnexar's
# objects, which valgrind reports as mismatched frees (CMakeLists.txt links
# stdc++ first for this reason).
set -eu
lib="$1"
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
[ -n "$needed" ] || { echo "readelf found no NEEDED entries in $lib"; exit 1; }
pos() { printf '%s\n' "$needed" | grep -n "^$1" | head -n 1 | cut -d: -f1; }
stdcxx=$(pos 'libstdc++\.so')
mimalloc=$(pos 'libmimalloc\.so')
[ -n "$stdcxx" ] || { echo "$lib does not need libstdc++:"; printf '%s\n' "$needed"; exit 1; }
if [ -n "$mimalloc" ] && [ "$mimalloc" -lt "$stdcxx" ]; then
  echo "$lib needs libmimalloc (entry $mimalloc) ahead of libstdc++ (entry $stdcxx):"
  printf '%s\n' "$needed"
  exit 1
fi
echo "ok: libstdc++ is NEEDED entry $stdcxx, libmimalloc ${mimalloc:-absent}"
