#!/bin/sh
# Runs a fuzz target for a bounded time: run.sh TARGET SECONDS SEED_DIR WORK_DIR
# New inputs go to WORK_DIR (in the build tree), never to the seeds in the
# source tree; a crash leaves its input there too (crash-*), and the
# target's output names it.
set -eu
target=$1 seconds=$2 seeds=$3 work=$4
mkdir -p "$work"
exec "$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/" "$work" "$seeds"
