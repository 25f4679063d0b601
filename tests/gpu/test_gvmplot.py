#!/usr/bin/env python3
"""gvmplot draws the trace of a PyTorch spill run, as a user would make it:

  spill_trace  a training loop (explicit weight matrices, tanh MLP, SGD)
               whose tensors need more than GVM_DEVICE_LIMIT=512M runs under
               GVM_SPILL=host with GVM_TRACE=DIR/trace-%p.json. The trace is
               one file named by the job's pid, a JSON array of trace events
               (name, ph, pid; timestamps), with "spill" slices (bytes, dev0
               to host) and counter tracks for dev0 and host; no events were
               dropped; its slices add up to the stats (one per move,
               bytes_migrated), its last counters are the stats' resident
               bytes, its allocation activity the stats' totals, and dev0's
               resident counter never passes the limit. Then
               `scripts/gvmplot TRACE -o memory.png` exits 0 and writes a
               PNG (signature, an IHDR chunk with a nonzero size).

Exit 77 without torch or a GPU, or when gvmplot finds no Python with
matplotlib (it exits 77 itself; checked first on a canned trace).
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402

MiB, GiB = gt.MiB, gt.GiB
GVMPLOT = os.path.join(gt.REPO, "scripts", "gvmplot")
LIMIT = 512 * MiB
TRAIN = {"layers": 6, "dim": 4096, "batch": 256, "steps": 4, "lr": 0.1}
# What a trace of one move looks like (core/trace.c): gvmplot's smallest input.
CANNED = [
    {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "gvmshim 1"}},
    {"name": "dev0", "ph": "C", "ts": 0.0, "pid": 1, "args": {"resident": 2 * MiB, "live": 2 * MiB}},
    {"name": "spill", "cat": "move", "ph": "X", "ts": 10.0, "dur": 100.0, "pid": 1, "tid": 1,
     "args": {"bytes": 2 * MiB, "from": "dev0", "to": "host", "GBps": 20.97, "ok": True, "base": "0x7f0000000000"}},
    {"name": "dev0", "ph": "C", "ts": 110.0, "pid": 1, "args": {"resident": 0, "live": 2 * MiB}},
    {"name": "host", "ph": "C", "ts": 110.0, "pid": 1, "args": {"resident": 2 * MiB}},
]


# ---- the job (a child) ---------------------------------------------------------------


def child_train(args):
    torch = gt.torch_or_skip()
    free, _ = torch.cuda.mem_get_info(0)
    if free < 2 * GiB:
        gt.child_skip("not enough GPU memory: %d MiB free" % (free // MiB))
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev)
    g.manual_seed(1234)
    d = args["dim"]
    ws = [(torch.randn(d, d, device=dev, generator=g) / d ** 0.5).requires_grad_() for _ in range(args["layers"])]
    x = torch.randn(args["batch"], d, device=dev, generator=g)
    target = torch.randn(args["batch"], d, device=dev, generator=g)
    losses = []
    for _ in range(args["steps"]):
        h = x
        for w in ws:
            h = torch.tanh(h @ w)
        loss = ((h - target) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for w in ws:
                w.sub_(args["lr"] * w.grad)
                w.grad = None
        losses.append(float(loss.item()).hex())
    torch.cuda.synchronize()
    return {"losses": losses, "pid": os.getpid(), "max_allocated": torch.cuda.max_memory_allocated(0)}


HANDLERS = {"train": child_train}


# ---- the parent ------------------------------------------------------------------------


def gvmplot(trace, png):
    """Runs scripts/gvmplot as a user does; returns (exit status, output)."""
    p = subprocess.run([GVMPLOT, trace, "-o", png], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=180)
    return p.returncode, p.stdout.decode("utf-8", "replace").strip()


def png_size(path):
    """(width, height) from a PNG's IHDR chunk; Failure when it is not a PNG."""
    gt.expect(os.path.exists(path), "gvmplot wrote no %s" % path)
    with open(path, "rb") as f:
        head = f.read(24)
    gt.expect(head[:8] == b"\x89PNG\r\n\x1a\n", "%s is not a PNG (starts %r)" % (path, head[:8]))
    gt.expect(head[12:16] == b"IHDR", "%s: no IHDR chunk first" % path)
    return struct.unpack(">II", head[16:24])


def plot_or_skip(tmp):
    """gvmplot on a canned one-move trace: skips the test where gvmplot
    finds no matplotlib (its exit 77), fails where it cannot draw."""
    trace, png = os.path.join(tmp, "canned.json"), os.path.join(tmp, "canned.png")
    with open(trace, "w") as f:
        json.dump(CANNED, f)
    rc, out = gvmplot(trace, png)
    if rc == 77:
        raise gt.Skip("gvmplot: no Python with matplotlib (%s)" % out, everything=True)
    gt.expect(rc == 0, "gvmplot on a canned one-move trace: exit %d: %s" % (rc, gt.tail(out)))
    w, h = png_size(png)
    gt.expect(w > 0 and h > 0, "the canned trace's PNG is %dx%d" % (w, h))


def counter(events, name):
    return [e for e in events if e.get("ph") == "C" and e.get("name") == name]


def check_trace(events, st):
    gt.expect(isinstance(events, list) and events, "the trace is not a non-empty JSON array of events")
    for e in events:
        gt.expect(isinstance(e, dict) and e.get("ph") in ("X", "C", "M", "i") and "name" in e and "pid" in e,
                  "a trace event without name, ph or pid: %r" % (e,))
        if e["ph"] in ("X", "C", "i"):
            gt.expect(isinstance(e.get("ts"), (int, float)), "a trace event without a timestamp: %r" % (e,))
    dropped = [e for e in events if e.get("name") == "dropped"]
    truncated = [e for e in events if e.get("name", "").startswith("trace truncated")]
    gt.expect(not dropped and not truncated, "the trace dropped events (%s) or was truncated (%s)"
              % (dropped, bool(truncated)))
    slices = [e for e in events if e["ph"] == "X"]
    spills = [e for e in slices if e["name"] == "spill"]
    dev0, host = counter(events, "dev0"), counter(events, "host")
    moves = st["migrations_d2h"] + st["migrations_h2d"] + st["migrations_d2d"] + st["migrations_failed"]
    moved = sum(e["args"]["bytes"] for e in slices if e["args"]["ok"])
    peak_dev0 = max(e["args"]["resident"] for e in dev0) if dev0 else 0
    peak_host = max(e["args"]["resident"] for e in host) if host else 0
    print("  trace: %d events, %d move slices (%d spills, %s), %d dev0 and %d host counters; dev0 resident peak %.0f "
          "MiB, host %.0f MiB; stats: %d moves, %.0f MiB migrated, spills %d"
          % (len(events), len(slices), len(spills), ", ".join(sorted(set(e["name"] for e in slices))), len(dev0),
             len(host), peak_dev0 / MiB, peak_host / MiB, moves, st["bytes_migrated"] / MiB, st["spills"]))
    gt.expect(st["spills"] > 0, "the run did not spill (stats: spills 0) under a %d MiB limit" % (LIMIT // MiB))
    gt.expect(spills, "no spill slice in the trace of a run that spilled %d times" % st["spills"])
    for e in spills:
        a = e["args"]
        gt.expect(a["bytes"] > 0 and a["from"] == "dev0" and a["to"] == "host" and e["dur"] >= 0,
                  "a spill slice that is not dev0 -> host with bytes: %r" % (e,))
    gt.expect(dev0 and host, "counter tracks: %d for dev0, %d for host" % (len(dev0), len(host)))
    gt.expect(peak_host > 0, "the host counter never shows spilled bytes")
    gt.expect(peak_dev0 <= LIMIT, "dev0's resident counter reached %.0f MiB, over the %d MiB limit"
              % (peak_dev0 / MiB, LIMIT // MiB))
    gt.expect(len(slices) == moves, "%d move slices, the stats count %d moves" % (len(slices), moves))
    gt.expect(moved == st["bytes_migrated"], "the slices moved %d bytes, bytes_migrated %d"
              % (moved, st["bytes_migrated"]))
    for name, key in (("dev0", "0"), ("host", "host")):
        last = counter(events, name)[-1]["args"]["resident"]
        want = int(st["resident_bytes"].get(key, 0))
        gt.expect(last == want, "the last %s counter says %d resident, the stats %d" % (name, last, want))
    allocs = sum(e["args"]["allocs"] for e in counter(events, "allocations"))
    frees = sum(e["args"]["frees"] for e in counter(events, "allocations"))
    gt.expect(allocs == st["allocations_total"] and frees == st["frees_total"],
              "allocation activity %d/%d, the stats %d/%d" % (allocs, frees, st["allocations_total"],
                                                             st["frees_total"]))


def case_spill_trace():
    tmp = tempfile.mkdtemp(prefix="gvmplot-")
    try:
        plot_or_skip(tmp)
        got = gt.run_child(__file__, "train", TRAIN, shim=True,
                           env={"GVM_DEVICE_LIMIT": str(LIMIT), "GVM_SPILL": "host",
                                "GVM_TRACE": os.path.join(tmp, "trace-%p.json")},
                           label="spill run, traced (shim)")
        want = "trace-%d.json" % got.result["pid"]
        traces = sorted(f for f in os.listdir(tmp) if f.startswith("trace-"))
        print("  job used %.0f MiB at most (max_memory_allocated), limit %d MiB; trace files: %s"
              % (got.result["max_allocated"] / MiB, LIMIT // MiB, traces))
        gt.expect(traces == [want], "trace files %s, want one named %s" % (traces, want))
        path = os.path.join(tmp, want)
        try:
            with open(path) as f:
                events = json.load(f)
        except ValueError as e:
            raise gt.Failure("the trace is not valid JSON: %s" % e)
        check_trace(events, got.stats)
        png = os.path.join(tmp, "memory.png")
        rc, out = gvmplot(path, png)
        gt.expect(rc == 0, "gvmplot %s -o memory.png: exit %d: %s" % (want, rc, gt.tail(out)))
        w, h = png_size(png)
        print("  gvmplot: exit 0, %s, %d bytes, %dx%d pixels" % (os.path.basename(png), os.path.getsize(png), w, h))
        gt.expect(w > 0 and h > 0 and os.path.getsize(png) > 1000, "the PNG is %dx%d, %d bytes"
                  % (w, h, os.path.getsize(png)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    return gt.suite_main("gvmplot", "torch", HANDLERS, [("spill_trace", case_spill_trace)])


if __name__ == "__main__":
    sys.exit(main())
