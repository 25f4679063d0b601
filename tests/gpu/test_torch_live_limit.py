#!/usr/bin/env python3
"""Spill and a device limit turned on in a running PyTorch training loop
(an MLP of explicit weight matrices, Adam, fixed seeds, no TF32) started
under the shim with neither, then the limit removed; steered with gvmctl:

  phase "before"   trains; each step timed (synchronized): T0 is their median
  then             gvmctl set PID spill=host device_limit=0:HALF (half the
                   job's live tensors) exits 0 and moves memory out
  phase "limited"  trains under HALF (spilling: slower, printed)
  then             gvmctl set PID device_limit=none exits 0
  phase "after"    trains; each step timed

Checked: every loss of the three phases is bit for bit that of the same
loop run natively; under the limit the job spilled (stats); after the
removal gvmshim holds the live tensors on the device again, the second step, and the median of the steps from it on, are
within 10 % of T0 (a limit removed leaves no slowness behind: launches
scanned since spill went on, spilled memory brought home in the
background at once). The figures are printed. Exit 77
without torch or a GPU.
"""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402

MiB, GiB = gt.MiB, gt.GiB
ALIGN = 2 * MiB
TRAIN = {"layers": 6, "dim": 8192, "batch": 1024, "lr": 1e-4, "phases": {"before": 8, "limited": 4, "after": 8}}
ORDER = ("before", "limited", "after")
SLACK = 1.10              # a step after the removal against T0
SETTLED_FROM = 1          # the second step after the removal (index 1) on


def child_train(args):
    torch = gt.torch_or_skip()
    free, _ = torch.cuda.mem_get_info(0)
    if free < 12 * GiB:
        gt.child_skip("not enough GPU memory: %d MiB free" % (free // MiB))
    p = TRAIN
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev)
    g.manual_seed(4321)
    d = p["dim"]
    ws = [(torch.randn(d, d, device=dev, generator=g) / d ** 0.5).requires_grad_() for _ in range(p["layers"])]
    x = torch.randn(p["batch"], d, device=dev, generator=g)
    target = torch.randn(p["batch"], d, device=dev, generator=g)
    opt = torch.optim.Adam(ws, lr=p["lr"], foreach=False)
    losses, times = [], {}

    def step():
        t0 = time.perf_counter()
        h = x
        for w in ws:
            h = torch.tanh(h @ w)
        loss = ((h - target) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()).hex())
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    step()   # warm-up: kernels loaded, Adam's state made; not timed
    for phase in ORDER:
        if args.get("steer"):
            gt.barrier(phase, {"allocated": torch.cuda.memory_allocated(0)})
        times[phase] = [step() for _ in range(p["phases"][phase])]
    if args.get("steer"):
        gt.barrier("end", {"allocated": torch.cuda.memory_allocated(0)})
    return {"losses": losses, "times_ms": times, "allocated": torch.cuda.memory_allocated(0)}


HANDLERS = {"train": child_train}


def mib(v):
    return "%.0f MiB" % (v / MiB)


def held0(job):
    rc, out, err = job.ctl("list", "--json", quiet=True)
    gt.expect(rc == 0, "gvmctl list --json exit %d: %s" % (rc, err.strip()))
    me = [p for p in json.loads(out) if p["pid"] == job.pid]
    gt.expect(me and me[0]["devices"], "gvmctl list does not show the job (pid %d)" % job.pid)
    return [d for d in me[0]["devices"] if d["device"] == 0][0]["held"]


def set_items(job, *items):
    rc, out, err = job.ctl("set", job.pid, *items)
    gt.expect(rc == 0, "gvmctl set %s exit %d: %s" % (" ".join(items), rc, err.strip()))
    return out


def fmt(ts):
    return " ".join("%.1f" % t for t in ts)


def case_limit_on_then_removed():
    if not gt.gvmctl_has("set"):
        raise gt.Skip("gvmctl has no 'set' command", everything=True)
    # "live_limit" names this test's job among the fakes of check_parents.py.
    ref = gt.once("native-live-limit", lambda: gt.run_child(__file__, "train", {"live_limit": True}, shim=False))
    # Neither spill nor a limit at start: both come with gvmctl set.
    job = gt.LiveChild(__file__, "train", {"steer": True, "live_limit": True}, shim=True, env={}, timeout=400,
                       label="training loop, spill and limit set live (shim)")
    try:
        job.at("before")
        job.go()
        at = job.at("limited")
        half = (at["allocated"] // 2) // ALIGN * ALIGN
        t = time.time()
        out = set_items(job, "spill=host", "device_limit=0:%d" % half)
        print("  limit %s set in %.2f s (live tensors %s): %s" % (mib(half), time.time() - t, mib(at["allocated"]),
                                                                 " | ".join(out.strip().splitlines())))
        gt.expect(held0(job) <= half, "gvmshim holds more than the %s limit after gvmctl set returned" % mib(half))
        job.go()
        at = job.at("after")
        out = set_items(job, "device_limit=none")
        job.go()
        at = job.at("end")
        held = held0(job)
        print("  at the end: gvmshim holds %s on device 0, live tensors %s" % (mib(held), mib(at["allocated"])))
        gt.expect(held >= at["allocated"], "gvmshim holds %s on device 0 after the limit was removed, the live "
                  "tensors are %s: they did not come back" % (mib(held), mib(at["allocated"])))
        job.go()
        got = job.finish()
    finally:
        job.cleanup()

    times = got.result["times_ms"]
    t0 = statistics.median(times["before"])
    after = times["after"]
    print("  step times (ms): before %s (median %.1f); limited %s; after removal %s"
          % (fmt(times["before"]), t0, fmt(times["limited"]), fmt(after)))
    ratios = [a / t0 for a in after]
    print("  after removal, against the median before: %s" % " ".join("%.2fx" % r for r in ratios))
    worst = gt.compare_series(ref.result["losses"], got.result["losses"], 0.0, "losses")
    st = got.stats
    print("  %d losses bit for bit those of the native run%s; spills %d, promotions %d, migrations failed %d"
          % (len(got.result["losses"]), "" if worst == 0 else " (NOT)", st["spills"], st["promotions"],
             st["migrations_failed"]))
    gt.expect(st["spills"] > 0, "nothing spilled under the limit set live")
    gt.expect(st["migrations_failed"] == 0, "%d migrations failed" % st["migrations_failed"])
    gt.expect(st["alloc_failures"] == 0, "%d allocations failed" % st["alloc_failures"])
    late = ratios[SETTLED_FROM:]
    print("  from the second step after the removal: %.2fx, then median %.2fx, at most %.2fx (allowed %.2fx)"
          % (late[0], statistics.median(late), max(late), SLACK))
    gt.expect(late[0] <= SLACK, "the second step after the limit was removed took %.2fx the step before the limit "
              "(%.1f ms; allowed %.2fx)" % (late[0], t0, SLACK))
    gt.expect(statistics.median(late) <= SLACK, "steps from the second after the limit was removed took %.2fx the "
              "step before the limit (median; %.1f ms; allowed %.2fx)" % (statistics.median(late), t0, SLACK))


def main():
    return gt.suite_main("torch-live-limit", "torch", HANDLERS, [("limit_on_then_removed", case_limit_on_then_removed)])


if __name__ == "__main__":
    sys.exit(main())
