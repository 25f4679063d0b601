#!/bin/sh
# A/B of shim settings on the spill loop (bench/spill.py's child, 1.5x a
# 4G limit), alternating so machine drift hits every setting alike.
#   [WS=bytes] [TRAIN=1|fused] scripts/probe/spill-ab.sh LIB ROUNDS "ENV_A" "ENV_B" ...
# Prints each run's median step (ms) and checksum, per setting the median of
# those, and whether every run's checksum was the same (exit 1 if not).
set -u
lib=$1 rounds=$2
shift 2
# WS: the working set in bytes (default 6 GiB: 1.5x the 4G limit); TRAIN=1
# (or fused): the training step instead of the read loop.
case "${TRAIN:-}" in
    "") step='' ;;
    fused) step=', "train": true, "fused": true' ;;
    *) step=', "train": true' ;;
esac
# SIDE=N: each read-loop step also queues N GEMMs on a second stream.
# STEPS=N: timed steps a run (default 5; a prefetch trial needs 13 to decide);
# WARMUP=N: untimed steps before them (default 2; 20 times the trial's verdict).
args="{\"tensor_bytes\": 134217728, \"steps\": ${STEPS:-5}, \"warmup\": ${WARMUP:-2}, \"ws\": [${WS:-6442450944}], \"side\": ${SIDE:-0}$step}"
for r in $(seq "$rounds"); do
    for setting in "$@"; do
        res=$(env LD_PRELOAD="$lib" GVM_DEVICE_LIMIT=4G GVM_SPILL=host $setting \
             python3 "$(dirname "$0")/../../bench/spill.py" --child "$args" 2>/dev/null |
             python3 -c 'import json,sys
for l in sys.stdin:
    if l.startswith("RESULT "):
        run=json.loads(l[7:])["runs"][0]; s=sorted(run["step_s"])
        print("%.1f %s" % (1e3*s[len(s)//2], run["checksum"]))')
        echo "$setting: $res"
    done
done | tee -a /dev/stderr | python3 -c 'import sys, collections
d = collections.defaultdict(list)
sums = set()
for l in sys.stdin:
    k, v = l.rsplit(":", 1)
    v = v.split()
    if v:
        d[k].append(float(v[0]))
        sums.add(v[1])
for k, v in d.items(): v.sort(); print("%-40s median %.1f ms of %s" % (k, v[len(v)//2], v))
# Every run computes the same sums: a setting that changed them changed the data.
print("checksums: %s" % ("no runs" if not sums else "all equal" if len(sums) == 1 else
                         "DIFFER: " + " ".join(sorted(sums))))
sys.exit(len(sums) > 1)'
