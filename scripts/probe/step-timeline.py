#!/usr/bin/env python3
"""Where a spilling training step's time goes, read from the GPU's own
timeline: bench/spill.py's training step (12 weights of 128 MiB, fused Adam
unless --foreach) run --warmup steps, then --steps steps under
torch.profiler, whose CUPTI records every kernel and every copy in the
process, gvmshim's swaps included. Per profiled step it prints:
  wall        the step as the program times it
  kernels     time some kernel runs (union)
  h2d / d2h   time some copy in that direction runs (union), copies >= 1 MiB
              and their bytes
  k&h2d       kernels and a copy in beside them (the overlap that hides)
  k only      kernels with no copy in (compute the link waits on)
  idle        neither kernels nor a copy in (nothing the link does, nothing
              the GPU computes: the host's time)
  in GB/s     bytes in / h2d union time
then the longest stretches without a copy in, with what runs meanwhile.
A profiled step runs ~10 % slower than an unprofiled one, and the first
profiled step may run much slower (the profiler starting): read the last.
bench/RESULTS.md, "What we learned", reads one.
    GVM_DEVICE_LIMIT=4G GVM_SPILL=host GVM_SPILL_HOST_MAP=lazy \
        scripts/gvmrun -- python3 scripts/probe/step-timeline.py \
        [--foreach] [--warmup 20] [--steps 3] [--trace out.json]"""
import argparse
import importlib.util
import json
import os
import tempfile
import time

import torch

MiB = 1 << 20


def bench_spill():
    """bench/spill.py, whose training step this probes."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "spill.py")
    spec = importlib.util.spec_from_file_location("bench_spill", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def union(iv):
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def length(iv):
    return sum(b - a for a, b in iv)


def intersect(x, y):
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append([a, b])
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def complement(iv, lo, hi):
    out, t = [], lo
    for a, b in iv:
        if a > t:
            out.append([t, min(a, hi)])
        t = max(t, b)
    if t < hi:
        out.append([t, hi])
    return [v for v in out if v[1] > v[0]]


def clip(events, lo, hi):
    return [e for e in events if e["ts"] < hi and e["ts"] + e["dur"] > lo]


def direction(name):
    for d in ("HtoD", "DtoH", "DtoD", "PtoP"):
        if d in name:
            return d
    return "?"


def analyse(trace, walls):
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in ev if e.get("name") == "timeline_step" and e.get("cat") == "user_annotation"),
                   key=lambda e: e["ts"])
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    print("%4s %7s %7s %7s %7s %7s %7s %7s %5s %8s %7s" %
          ("step", "wall", "kernels", "h2d", "d2h", "k&h2d", "k only", "idle", "in#", "in MiB", "in GB/s"))
    for i, s in enumerate(steps):
        lo = s["ts"]
        hi = steps[i + 1]["ts"] if i + 1 < len(steps) else s["ts"] + s["dur"]
        g = clip(gpu, lo, hi)
        k = union([[max(lo, e["ts"]), min(hi, e["ts"] + e["dur"])] for e in g if e["cat"] != "gpu_memcpy"])
        cp = [e for e in g if e["cat"] == "gpu_memcpy" and e.get("args", {}).get("bytes", 0) >= MiB]
        h = [e for e in cp if direction(e["name"]) == "HtoD"]
        d = [e for e in cp if direction(e["name"]) == "DtoH"]
        hu = union([[max(lo, e["ts"]), min(hi, e["ts"] + e["dur"])] for e in h])
        du = union([[max(lo, e["ts"]), min(hi, e["ts"] + e["dur"])] for e in d])
        kh = intersect(k, hu)
        idle = complement(union(k + hu), lo, hi)
        nbytes = sum(e["args"]["bytes"] for e in h)
        ms = lambda us: us / 1e3
        print("%4d %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %5d %8.0f %7.1f" %
              (i, 1e3 * walls[i] if i < len(walls) else ms(hi - lo), ms(length(k)), ms(length(hu)),
               ms(length(du)), ms(length(kh)), ms(length(k) - length(kh)), ms(length(idle)),
               len(h), nbytes / MiB, nbytes / 1e3 / max(1e-9, length(hu))))
        gaps = sorted(complement(hu, lo, hi), key=lambda v: v[0] - v[1])[:8]
        for a, b in sorted(gaps):
            running = sorted({e["name"][:48] for e in clip(g, a, b) if e["cat"] != "gpu_memcpy"})
            print("       no copy in at +%6.1f ms for %5.2f ms; kernels: %s" %
                  (ms(a - lo), ms(b - a), ", ".join(running[:3]) + (" ..." if len(running) > 3 else "") or "none"))
        sizes = sorted({e["args"]["bytes"] // MiB for e in cp})
        rates = [e["args"]["bytes"] / 1e3 / e["dur"] for e in h if e["dur"] > 0]
        if rates:
            rates.sort()
            print("       copies in: sizes MiB %s, per-copy GB/s min %.1f median %.1f max %.1f" %
                  (sizes, rates[0], rates[len(rates) // 2], rates[-1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--foreach", action="store_true")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--trace", default=None)
    o = ap.parse_args()
    spill = bench_spill()
    x, params, opt = spill.training_set(torch, 128 * MiB // (4 * spill.COLS), 12, not o.foreach)
    for _ in range(o.warmup):
        spill.training_step(x, params, opt)
    torch.cuda.synchronize()
    walls = []
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(o.steps):
            t0 = time.time()
            with torch.profiler.record_function("timeline_step"):
                loss = spill.training_step(x, params, opt)
            walls.append(time.time() - t0)
    print("loss after the last step %s" % float(loss).hex())
    path = o.trace
    if not path:
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
    prof.export_chrome_trace(path)
    with open(path) as f:
        analyse(json.load(f), walls)
    if not o.trace:
        os.unlink(path)


if __name__ == "__main__":
    main()
