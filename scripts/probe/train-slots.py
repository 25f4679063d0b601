#!/usr/bin/env python3
"""What holds a training step's device memory besides its tensors: run
bench/spill.py's training step (fused Adam, 12 weights of 128 MiB) a few
steps under gvmshim, then print PyTorch's segments and gvmshim's live
held/resident bytes (gvmctl stats).  scripts/gvmrun -- python3 THIS"""
import collections
import importlib.util
import json
import os
import subprocess
import sys

import torch

MiB = 1 << 20
rows, n = 4096, 12
spec = importlib.util.spec_from_file_location(
    "bench_spill", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "spill.py"))
spill = importlib.util.module_from_spec(spec)
spec.loader.exec_module(spill)
x, params, opt = spill.training_set(torch, rows, n, "--foreach" not in sys.argv)
for i in range(4):
    print("step %d loss %s" % (i, spill.training_step(x, params, opt).hex()))
torch.cuda.synchronize()
segs = torch.cuda.memory_snapshot()
sizes = collections.Counter()
active = 0
for s in segs:
    sizes[s["total_size"] // MiB] += 1
    active += sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated")
print("segments (MiB x count):", dict(sorted(sizes.items())))
print("reserved %.1f MiB, active %.1f MiB, tensors %d MiB"
      % (sum(s["total_size"] for s in segs) / MiB, active / MiB, 4 * n * 128))
ctl = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gvmctl")
r = subprocess.run([ctl, "stats", str(os.getpid()), "--json"], capture_output=True, text=True)
try:
    st = json.loads(r.stdout)
    for k in ("resident_bytes", "held_bytes", "held_peak", "limit", "bytes_live", "spills", "promotions"):
        v = st.get(k)
        if isinstance(v, dict):
            v = {a: "%.1f MiB" % (int(b) / MiB) if b is not None else "none" for a, b in v.items()}
        print("%s: %s" % (k, v))
except ValueError:
    print("gvmctl stats:", r.stdout[:500], r.stderr[:500])
