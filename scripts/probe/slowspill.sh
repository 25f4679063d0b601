#!/bin/sh
# Why gpu-reset's spill scenarios took 6-116 s under the shim on two H100s
# (1 s natively): each child run with time-stamped output, the shim's
# counters, and the GPUs' PCIe traffic beside it.
out=${OUT:-/tmp}
lib=$PWD/build/preload/libgvmshim.so
stamp() { python3 -u -c 'import sys,time
t=time.time()
for l in sys.stdin: print("%8.3f %s" % (time.time()-t, l), end="")'; }
nvidia-smi dmon -s ut -d 1 > "$out/dmon.txt" 2>&1 &
dm=$!
one() {   # name spill extra-env...
    name=$1 sp=$2; shift 2
    echo "== $name $sp $*"
    ( env GVM_DEVICE_LIMIT=0:1G GVM_SPILL=$sp GVM_STATS=1 "$@" LD_PRELOAD=$lib timeout 60 \
        build/tests/gpu/gpu-reset --child $name 2>&1; echo "rc=$?" ) | stamp > "$out/$name-$(echo $sp | tr , +)-$#.log"
    tail -1 "$out/$name-$(echo $sp | tr , +)-$#.log"
}
( date +%s; build/tests/gpu/gpu-reset --child spill 2>&1 | stamp | tail -2 ) > "$out/native.log"
one spill host
one spill host GVM_LOG=debug
one spill-lazy host GVM_SPILL_HOST_MAP=lazy
one peer peer,host
one spill host GVM_PROMOTE=0 GVM_PREFETCH=0
kill $dm
