#!/bin/sh
# Device-side exploration: block sizes for moves to host, phase times.
set -u
cd "$(dirname "$0")/../.."
meson setup build -Dgpu_tests=enabled -Dgpu_arch=native >/dev/null 2>&1 || meson setup --reconfigure build -Dgpu_arch=native >/dev/null
ninja -C build >/dev/null 2>&1 || { ninja -C build | tail -20; exit 1; }
lib=$PWD/build/preload/libgvmshim.so
for bs in 64M 128M 256M; do
  echo "== block_size $bs"
  GVM_BLOCK_SIZE=$bs GVM_HOST_POOL=20G GVM_POOL_LIMIT=16G LD_PRELOAD=$lib ./build/bench/bench-migrate --sizes 1G,8G --rounds 4 2>/dev/null | grep BENCH_JSON | python3 -c '
import json,sys
d=json.loads(sys.stdin.read().split("BENCH_JSON",1)[1])
for r in d["rows"]: print("%6s %s first %.1f warm %.1f link %.1f ratio %.3f" % (int(r["size"])>>20, r["dir"], r["first_gbps"], r["warm_gbps"], r["link_gbps"], r["warm_gbps"]/r["link_gbps"]))'
done
echo "== phases (64M, 1G, debug)"
GVM_LOG=debug GVM_HOST_POOL=20G LD_PRELOAD=$lib ./build/bench/bench-migrate --sizes 1G --rounds 3 2>&1 | grep "move of" | tail -6
echo "== creating device memory beside copies (createcopy.c)"
cuda=${CUDA_HOME:-/usr/local/cuda}
cc -O2 scripts/probe/createcopy.c -I"$cuda/include" -L"$cuda/lib64/stubs" -lcuda -lpthread -o build/createcopy && ./build/createcopy
