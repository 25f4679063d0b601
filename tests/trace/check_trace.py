"""GVM_TRACE as a user meets it: run a program that moves memory under the
shim with a trace and the stats, then check that the trace is valid JSON in
the trace-event format, that its counters and slices add up to the stats,
that the size bound holds, and that gvmplot draws it.

    check_trace.py SHIM SIM_DIR WORKLOAD GVMPLOT
"""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile

shim, simdir, workload, gvmplot = sys.argv[1:5]
tmp = tempfile.mkdtemp(prefix="gvmshim-trace-")
atexit.register(shutil.rmtree, tmp, True)   # passed or failed
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(rounds, extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GVM_")}
    env.update(LD_PRELOAD=shim, LD_LIBRARY_PATH=simdir, SIMCUDA_DEVICES="2", SIMCUDA_MEM="256M",
               SIMCUDA_HOST_MEM="1G", GVM_POOL_LIMIT="0")
    env.update(extra)
    p = subprocess.run([workload, str(rounds)], env=env, capture_output=True, text=True, timeout=120)
    check(p.returncode == 0 and "moved" in p.stdout, "workload exit %d: %s" % (p.returncode, p.stderr[-500:]))
    return p


def load(path):
    with open(path) as f:
        return json.load(f)


# 1. A trace and the stats of one run agree.
trace_path = os.path.join(tmp, "trace-%p.json")
stats_path = os.path.join(tmp, "stats.json")
p = run(2, {"GVM_TRACE": trace_path, "GVM_STATS": stats_path})
traces = [f for f in os.listdir(tmp) if f.startswith("trace-")]
check(len(traces) == 1 and traces[0] != "trace-%p.json", "one trace file named by pid: %s" % traces)
trace = load(os.path.join(tmp, traces[0]))
stats = load(stats_path)
check(isinstance(trace, list) and trace, "the trace is a JSON array of events")
for ev in trace:
    check(isinstance(ev, dict) and ev.get("ph") in ("X", "C", "M", "i") and "name" in ev and "pid" in ev,
          "a trace event has name, ph and pid: %s" % ev)
    if ev.get("ph") in ("X", "C", "i"):
        check(isinstance(ev.get("ts"), (int, float)), "an event has a timestamp: %s" % ev)
slices = [e for e in trace if e.get("ph") == "X"]
moves = stats["migrations_d2h"] + stats["migrations_h2d"] + stats["migrations_d2d"] + stats["migrations_failed"]
check(len(slices) == moves, "one slice per move: %d slices, %d moves" % (len(slices), moves))
check(all(e["name"] in ("migrate", "spill", "promote", "pause", "resume") for e in slices),
      "each slice says why it moved: %s" % sorted(set(e["name"] for e in slices)))
moved = sum(e["args"]["bytes"] for e in slices if e["args"]["ok"])
check(moved == stats["bytes_migrated"], "slice bytes %d == bytes_migrated %d" % (moved, stats["bytes_migrated"]))
for e in slices:
    check(e["dur"] >= 0 and e["args"]["from"] != e["args"]["to"], "a move slice goes somewhere: %s" % e)


def last_counter(name):
    cs = [e for e in trace if e.get("ph") == "C" and e["name"] == name]
    return cs[-1]["args"] if cs else None


for loc, key in (("dev0", "0"), ("dev1", "1"), ("host", "host")):
    c = last_counter(loc)
    check(c is not None and c["resident"] == stats["resident_bytes"][key],
          "last %s counter %s == resident_bytes %s" % (loc, c, stats["resident_bytes"][key]))
allocs = sum(e["args"]["allocs"] for e in trace if e.get("ph") == "C" and e["name"] == "allocations")
frees = sum(e["args"]["frees"] for e in trace if e.get("ph") == "C" and e["name"] == "allocations")
check(allocs == stats["allocations_total"] and frees == stats["frees_total"],
      "allocation activity %d/%d == stats %d/%d" % (allocs, frees, stats["allocations_total"], stats["frees_total"]))

# 2. The size bound: many moves, a 4K trace stays within it and stays valid.
small = os.path.join(tmp, "small.json")
run(40, {"GVM_TRACE": small, "GVM_TRACE_MAX": "4K"})
check(os.path.getsize(small) <= 4096, "bounded trace is %d bytes" % os.path.getsize(small))
bounded = load(small)
check(any(e.get("name", "").startswith("trace truncated") for e in bounded), "a truncated trace says so")

# 3. gvmplot draws the first trace (where matplotlib can be had).
png = os.path.join(tmp, "memory.png")
p = subprocess.run([sys.executable, gvmplot, os.path.join(tmp, traces[0]), "-o", png],
                   capture_output=True, text=True, timeout=120)
if p.returncode == 77:
    print("gvmplot skipped:", p.stderr.strip())
else:
    check(p.returncode == 0, "gvmplot exit %d: %s" % (p.returncode, p.stderr[-800:]))
    check(os.path.exists(png) and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n", "gvmplot wrote a PNG")

print("%d passed, %d failed" % (0 if failures else 1, 1 if failures else 0))
sys.exit(1 if failures else 0)
