#!/usr/bin/env python3
"""Runs a gpu-suite program under the shim with GVM_STATS pointing at a
temporary file, then checks the JSON: the program's allocations were served
by gvmshim. Passes exit status 77 (skip) through.

    run_checked.py PROGRAM [ARGS...]
"""
import json
import os
import subprocess
import sys
import tempfile

fd, path = tempfile.mkstemp(suffix=".json")
os.close(fd)
os.unlink(path)
env = dict(os.environ, GVM_STATS=path)
rc = subprocess.call(sys.argv[1:], env=env)
if rc != 0:
    sys.exit(rc)
try:
    stats = json.load(open(path))
finally:
    if os.path.exists(path):
        os.unlink(path)
calls = stats["driver_calls"]
problems = []
if stats["allocations_total"] < 10:
    problems.append("only %d allocations were served" % stats["allocations_total"])
if stats["alloc_failures"] > 1:
    problems.append("%d allocations failed" % stats["alloc_failures"])
if calls.get("cuMemAlloc_v2", 0) < stats["allocations_total"] - calls.get("cuMemAllocPitch_v2", 0):
    problems.append("allocations did not arrive through cuMemAlloc_v2: %s" % calls)
if "cuGetProcAddress_v2" not in calls and "cuGetProcAddress" not in calls:
    problems.append("the resolver was never interposed")
for p in problems:
    print("FAIL stats:", p)
print("stats: %d allocations served, %d live at exit, %d calls passed through"
      % (stats["allocations_total"], stats["allocations_live"], stats["passthrough_calls"]))
print("%d passed, %d failed" % (4 - len(problems), len(problems)))
sys.exit(1 if problems else 0)
