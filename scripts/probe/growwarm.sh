#!/bin/sh
# Why gvm_realloc's warm rounds (8 -> 16 GiB) take 1.9-3.0 ms where its
# first takes 0.7-1.8 and the driver's own create+map+access 0.5-1.1
# (bench/RESULTS.md, grow rows): each round's get / map / access split
# from the debug log, with the default cache and with frees kept
# (GVM_CACHE_IDLE=0: nothing given back between rounds). Run from the
# repository root after a build (scripts/gpu-all).
out=${OUT:-/tmp}
lib=$PWD/build/preload/libgvmshim.so
prog=build/bench/bench-grow
[ -x "$prog" ] || { echo "growwarm: $prog not built" >&2; exit 1; }
for idle in default 0; do
    set -- LD_PRELOAD=$lib GVM_LOG=debug
    [ $idle = default ] || set -- "$@" GVM_CACHE_IDLE=$idle
    env "$@" "$prog" --sizes 8G --rounds 6 > "$out/grow-idle-$idle.log" 2>&1
    echo "== cache_idle $idle (rc $?)"
    grep -E "grow of|realloc|round|fresh|regrow" "$out/grow-idle-$idle.log" | cut -c1-200 | head -40
done
