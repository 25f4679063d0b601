#!/usr/bin/env python3
"""gvmctl set PID device_limit=... on a running PyTorch training loop (an
MLP of explicit weight matrices, Adam, fixed seeds, no TF32), steered from
outside. The job runs under GVM_SPILL=host with a device limit far above
what it needs, trains in three phases and stops at a barrier after each:

  after phase 1  gvmctl set PID device_limit=0:SMALL (half of the job's live
                 tensors: weights, gradients, Adam's state) exits 0, printing
                 the change (device_limit: OLD -> NEW); then NVML shows the
                 process at most SMALL plus its own overhead (the CUDA
                 context and libraries, measured from a tiny run under the
                 same settings, as test_torch_limit.py does) plus one
                 transfer piece; torch.cuda.mem_get_info's total in the job
                 is at most SMALL; gvmctl list shows the new limit. A bad
                 value is refused with a non-zero exit and one line, and
                 changes nothing.
  phase 2        trains under SMALL: NVML, sampled in the job, stays within
                 the same bound the whole phase
  after phase 2  gvmctl set PID device_limit=0:BIG exits 0
  phase 3        trains; gvmshim holds at least the live tensors on the
                 device again (they came back)

Every loss of the three phases is bit for bit that of the same loop run
natively. Exit 77 without torch or a GPU, and while gvmctl has no `set`
command (its manual does not list it). The NVML bounds are checked where
NVML (or nvidia-smi) lists the job's process; otherwise the test says so
and checks gvmshim's own accounting only.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402
from gvmnvml import Sampler, smi_used, try_nvml  # noqa: E402

MiB, GiB = gt.MiB, gt.GiB
PIECE = 64 * MiB            # one transfer piece: GVM_BLOCK_SIZE's default
ALIGN = 2 * MiB
TRAIN = {"layers": 6, "dim": 4096, "batch": 512, "phases": [3, 2, 2], "lr": 1e-3}
TINY = {"dim": 256, "batch": 16}


# ---- the job (a child) ---------------------------------------------------------------


def child_train(args):
    """With steer, stops at a barrier after each phase; with tiny, the same
    kernels on a tiny problem (what the process holds besides its data)."""
    torch = gt.torch_or_skip()
    if args.get("need_free"):
        free, _ = torch.cuda.mem_get_info(0)
        if free < args["need_free"]:
            gt.child_skip("not enough GPU memory: %d MiB free" % (free // MiB))
    p = dict(TRAIN, **(TINY if args.get("tiny") else {}))
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev)
    g.manual_seed(1234)
    d = p["dim"]
    ws = [(torch.randn(d, d, device=dev, generator=g) / d ** 0.5).requires_grad_() for _ in range(p["layers"])]
    x = torch.randn(p["batch"], d, device=dev, generator=g)
    target = torch.randn(p["batch"], d, device=dev, generator=g)
    # One kernel per tensor (no foreach): no single launch reaches more than
    # a weight, its gradient and its two moments, well within the lowered limit.
    opt = torch.optim.Adam(ws, lr=p["lr"], foreach=False)
    losses = []
    nvml, nvml_missing = try_nvml(1) if args.get("sample") else (None, "not sampled")

    def train(steps):
        for _ in range(steps):
            h = x
            for w in ws:
                h = torch.tanh(h @ w)
            loss = ((h - target) ** 2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.item()).hex())
        torch.cuda.synchronize()

    def measure():
        free, total = torch.cuda.mem_get_info(0)
        return {"free": free, "total": total, "nvml": nvml.used(0) if nvml else None,
                "nvml_missing": nvml_missing}

    peaks = []
    for i, steps in enumerate(p["phases"]):
        sampler = Sampler(nvml, 1) if nvml else None
        if sampler:
            sampler.start()
        train(steps)
        if sampler:
            sampler.stop()
        peaks.append(sampler.peak[0] if sampler else None)
        if args.get("steer"):
            gt.barrier("phase%d" % (i + 1), {"allocated": torch.cuda.memory_allocated(0), "nvml_peak": peaks[-1],
                                             "nvml_missing": nvml_missing}, measure)
    return {"losses": losses, "allocated": torch.cuda.memory_allocated(0),
            "max_allocated": torch.cuda.max_memory_allocated(0), "nvml_peaks": peaks, "nvml_missing": nvml_missing,
            "device_total": torch.cuda.mem_get_info(0)[1]}


HANDLERS = {"train": child_train}


# ---- the parent ------------------------------------------------------------------------


def mib(v):
    return "n/a" if v is None else "%.0f MiB" % (v / MiB)


def native():
    return gt.once("native", lambda: gt.run_child(__file__, "train", {"need_free": 4 * GiB}, shim=False))


def overhead(env):
    """NVML's peak of the tiny job under the same settings, or None."""
    got = gt.once("overhead", lambda: gt.run_child(__file__, "train", {"tiny": True, "sample": True}, shim=True,
                                                   env=env, label="overhead: the tiny job (shim)"))
    peaks = [v for v in got.result["nvml_peaks"] if v is not None]
    if not peaks:
        print("  (NVML does not list the job: %s)" % got.result["nvml_missing"])
        return None
    return max(peaks)


def used(job):
    m = job.measure()
    m["smi"] = smi_used(job.pid)
    m["used"] = m["nvml"] if m["nvml"] is not None else m["smi"]
    return m


def device0(job):
    rc, out, err = job.ctl("list", "--json", quiet=True)
    gt.expect(rc == 0, "gvmctl list --json exit %d: %s" % (rc, err.strip()))
    me = [p for p in json.loads(out) if p["pid"] == job.pid]
    gt.expect(me and me[0]["devices"], "gvmctl list does not show the job (pid %d): %s" % (job.pid, out.strip()))
    return [d for d in me[0]["devices"] if d["device"] == 0][0]


def set_limit(job, limit):
    rc, out, err = job.ctl("set", job.pid, "device_limit=0:%d" % limit)
    gt.expect(rc == 0, "gvmctl set device_limit=0:%d exit %d: %s" % (limit, rc, err.strip()))
    changes = [l for l in out.splitlines() if l.startswith("device_limit:")]
    gt.expect(len(changes) == 1 and " -> " in changes[0], "gvmctl set printed no 'device_limit: OLD -> NEW' line: "
              "%r" % out)


def settle(job, allowed, seconds=3.0):
    """The job's NVML figure, polled until it is within `allowed` (the
    driver may take a moment to show released memory) or `seconds` pass."""
    t_end = time.time() + seconds
    while True:
        m = used(job)
        if allowed is None or m["used"] is None or m["used"] <= allowed or time.time() > t_end:
            return m
        time.sleep(0.2)


def came_back(job, live, seconds=5.0):
    """gvmctl list's entry for device 0, polled until gvmshim holds at least
    `live` bytes there (the promoter brings the rest within its interval)
    or `seconds` pass."""
    t_end = time.time() + seconds
    while True:
        d0 = device0(job)
        if d0["held"] >= live or time.time() > t_end:
            return d0
        time.sleep(0.25)


def case_lower_then_raise():
    if not gt.gvmctl_has("set"):
        raise gt.Skip("gvmctl has no 'set' command yet (its --help lists none): nothing to test", everything=True)
    ref = native()
    live = ref.result["allocated"]
    small = (live // 2) // ALIGN * ALIGN
    # Far above the job, below the device (gvmshim holds a limit to the device's size).
    big = min(4 * ref.result["max_allocated"] + GiB, ref.result["device_total"] * 3 // 4) // ALIGN * ALIGN
    env = {"GVM_SPILL": "host", "GVM_DEVICE_LIMIT": "0:%d" % big}
    over = overhead(env)
    allowed = small + over + PIECE if over is not None else None
    print("  live tensors %s (max allocated %s natively); limit %s at start, lowered to %s; NVML overhead %s"
          % (mib(live), mib(ref.result["max_allocated"]), mib(big), mib(small), mib(over)))

    job = gt.LiveChild(__file__, "train", {"steer": True, "sample": True}, shim=True, env=env,
                       label="training loop steered by gvmctl (shim)")
    try:
        job.at("phase1")
        before = used(job)
        set_limit(job, small)
        after = settle(job, allowed)
        d0 = device0(job)
        print("  after lowering: NVML %s -> %s (nvidia-smi %s -> %s, allowed %s); gvmshim holds %s, limit %s; "
              "mem_get_info total %s"
              % (mib(before["used"]), mib(after["used"]), mib(before["smi"]), mib(after["smi"]), mib(allowed),
                 mib(d0["held"]), mib(d0["limit"]), mib(after["total"])))
        gt.expect(d0["limit"] == small, "gvmctl list shows limit %d after setting %d" % (d0["limit"], small))
        gt.expect(d0["held"] <= small, "gvmshim holds %s on device 0 after gvmctl set returned, limit %s"
                  % (mib(d0["held"]), mib(small)))
        gt.expect(after["total"] <= small, "torch.cuda.mem_get_info reports a total of %s under a %s limit"
                  % (mib(after["total"]), mib(small)))
        if allowed is not None and after["used"] is not None:
            gt.expect(after["used"] <= allowed, "NVML: the process holds %s after gvmctl set returned; allowed %s "
                      "(limit + overhead + one piece)" % (mib(after["used"]), mib(allowed)))
            gt.expect(after["used"] < before["used"], "NVML: the process holds %s, %s before the limit was lowered"
                      % (mib(after["used"]), mib(before["used"])))

        rc, out, err = job.ctl("set", job.pid, "device_limit=12Q")
        lines = [l for l in (out + err).splitlines() if l.strip()]
        gt.expect(rc != 0, "gvmctl set device_limit=12Q exit 0: a bad value was accepted")
        gt.expect(len(lines) == 1, "a refused gvmctl set printed %d lines: %r" % (len(lines), out + err))
        gt.expect(device0(job)["limit"] == small, "a refused gvmctl set changed the limit")

        job.go()
        p2 = job.at("phase2")
        print("  phase 2 under the lowered limit: NVML peak %s (allowed %s)" % (mib(p2["nvml_peak"]), mib(allowed)))
        if allowed is not None and p2["nvml_peak"] is not None:
            gt.expect(p2["nvml_peak"] <= allowed, "NVML: the process peaked at %s while training under the lowered "
                      "limit; allowed %s" % (mib(p2["nvml_peak"]), mib(allowed)))
        set_limit(job, big)
        job.go()
        p3 = job.at("phase3")
        d0 = came_back(job, p3["allocated"])
        back = used(job)
        print("  phase 3 after raising the limit back: gvmshim holds %s on device 0 (live tensors %s), NVML %s, "
              "limit %s" % (mib(d0["held"]), mib(p3["allocated"]), mib(back["used"]), mib(d0["limit"])))
        gt.expect(d0["limit"] == big, "gvmctl list shows limit %d after raising it to %d" % (d0["limit"], big))
        gt.expect(d0["held"] >= p3["allocated"], "gvmshim holds %s on device 0 after a phase under the raised "
                  "limit, the live tensors are %s: they did not come back" % (mib(d0["held"]), mib(p3["allocated"])))
        job.go()
        got = job.finish()
    finally:
        job.cleanup()

    worst = gt.compare_series(ref.result["losses"], got.result["losses"], 0.0, "losses")
    st = got.stats
    print("  %d losses bit for bit those of the native run%s; spills %d, promotions %d, migrations failed %d"
          % (len(got.result["losses"]), "" if worst == 0 else " (NOT)", st["spills"], st["promotions"],
             st["migrations_failed"]))
    gt.expect(st["migrations_failed"] == 0, "%d migrations failed" % st["migrations_failed"])
    gt.expect(st["alloc_failures"] == 0, "%d allocations failed" % st["alloc_failures"])


def main():
    return gt.suite_main("gvmctl-live", "torch", HANDLERS, [("lower_then_raise", case_lower_then_raise)])


if __name__ == "__main__":
    sys.exit(main())
