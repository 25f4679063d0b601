#!/bin/sh
# Runs a fuzz target over a bounded number of inputs:
#   run.sh TARGET RUNS SEED_DIR WORK_DIR
# RUNS times GVM_TEST_SCALE where that is set (scripts/test --long). New
# inputs go to WORK_DIR (in the build tree), never to the seeds in the
# source tree; a crash leaves its input there too (crash-*), and the
# target's output names it.
set -eu
target=$1 runs=$2 seeds=$3 work=$4
if [ -n "${GVM_TEST_SCALE:-}" ]; then
    runs=$(awk -v r="$runs" -v f="$GVM_TEST_SCALE" 'BEGIN { n = int(r * f); print (n > 0 ? n : 1) }')
fi
mkdir -p "$work"
exec "$target" -runs="$runs" -timeout=60 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/" "$work" "$seeds"
