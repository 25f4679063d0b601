#!/usr/bin/env python3
"""The parent side of the gpu tests that steer or trace a running job
(test_gvmctl_pause.py, test_gvmctl_pause_process.py, test_gvmctl_live.py,
test_gvmplot.py, test_torch_live_limit.py: its step times unchecked) without a
GPU: their cases run unchanged against fake jobs on the simulated driver,
so LiveChild, the gvmctl calls, the memory arithmetic and the trace checks
are exercised by the cpu suite, not only on the rare machine with a GPU. A
fake job keeps the real one's protocol (barriers, measures, result) with a
few cuMemAlloc'd buffers in place of tensors; its "NVML" figure is the
simulated device's physical bytes plus a made-up context overhead.

    check_parents.py       (env: GVM_TEST_LIB, GVM_TEST_GVMCTL, the
                            simulated libcuda.so.1 on LD_LIBRARY_PATH and
                            SIMCUDA_MEM of at least 512M)

The live case skips while gvmctl has no `set`, and the gvmplot case where
gvmplot finds no matplotlib, as on a GPU machine.
"""
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402
import test_gvmctl_live as live  # noqa: E402
import test_gvmctl_pause as pause  # noqa: E402
import test_gvmctl_pause_process as whole  # noqa: E402
import test_gvmplot as plot  # noqa: E402
import test_torch_live_limit as live_limit  # noqa: E402

MiB = gt.MiB
CONTEXT = 300 * MiB     # what a CUDA context would add to NVML's figure


class Sim:
    """The simulated driver in a fake job: context current, allocation
    through the shim's hooks when it is preloaded."""

    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.shim = "LD_PRELOAD" in os.environ
        self.hooks = ctypes.CDLL(None) if self.shim else self.cu
        ctx = ctypes.c_void_p()
        if self.cu.cuInit(0) or self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) or \
                self.cu.cuCtxSetCurrent(ctx):
            raise RuntimeError("the simulated driver did not start")
        self.cu.simcuda_phys_bytes.restype = ctypes.c_size_t

    def alloc(self, size):
        p = ctypes.c_ulonglong()
        rc = self.hooks.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size))
        if rc:
            raise RuntimeError("cuMemAlloc_v2(%d): %d" % (size, rc))
        return p.value

    def fill(self, ptr, value, size):
        rc = self.hooks.cuMemsetD8_v2(ctypes.c_ulonglong(ptr), ctypes.c_ubyte(value), ctypes.c_size_t(size))
        if rc:
            raise RuntimeError("cuMemsetD8_v2: %d" % rc)

    def read(self, ptr, size):
        buf = (ctypes.c_ubyte * size)()
        rc = self.hooks.cuMemcpyDtoH_v2(buf, ctypes.c_ulonglong(ptr), ctypes.c_size_t(size))
        if rc:
            raise RuntimeError("cuMemcpyDtoH_v2: %d" % rc)
        return bytes(buf)

    def meminfo(self):
        f, t = ctypes.c_size_t(), ctypes.c_size_t()
        self.hooks.cuMemGetInfo_v2(ctypes.byref(f), ctypes.byref(t))
        return f.value, t.value

    def nvml(self):
        return self.cu.simcuda_phys_bytes(0) + CONTEXT if self.shim else None


def fake_pause_job(args):
    """test_gvmctl_pause's job: a 'model' buffer under the tag, one barrier."""
    sim = Sim()
    size = 64 * MiB
    gvmshim = None
    if args.get("shim"):
        import gvmshim
        with gvmshim.tag("model"):
            model = sim.alloc(size)
    else:
        model = sim.alloc(size)
    sim.fill(model, 7, size)

    def measure():
        free, _ = sim.meminfo()
        m = {"free": free, "nvml": sim.nvml(), "nvml_missing": None}
        if gvmshim:
            m["info"] = gt.gvm_info_dict(gvmshim.query(model))
        return m

    gt.barrier("pause", {"model_bytes": size}, measure)
    res = {}
    data = sim.read(model, size)
    if args.get("reload"):
        res["zero_after_resume"] = not any(data)
        sim.fill(model, 7, size)
        data = sim.read(model, size)
    ok = data == bytes([7]) * size
    res.update(losses=["0x1.8p+0" if ok else "0x1.0p+0"], outputs=[["0x1.0p+0", "0x1.0p-1" if ok else "0x0.0p+0"]])
    return res


def fake_train_job(args):
    """test_gvmctl_live's job: six buffers written every 'step', a barrier
    after each phase, the 'NVML' peak of each phase."""
    sim = Sim()
    size = (2 if args.get("tiny") else 16) * MiB
    bufs = [sim.alloc(size) for _ in range(6)]
    nvml = sim.nvml if args.get("sample") and sim.shim else None
    losses, peaks = [], []

    def measure():
        free, total = sim.meminfo()
        return {"free": free, "total": total, "nvml": nvml() if nvml else None, "nvml_missing": None}

    for i, steps in enumerate(live.TRAIN["phases"]):
        peak = 0
        for _ in range(steps):
            for b in bufs:
                sim.fill(b, len(losses) % 251, size)
                peak = max(peak, nvml() if nvml else 0)
            ok = all(sim.read(b, 4096) == bytes([len(losses) % 251]) * 4096 for b in bufs)
            losses.append(float(len(losses) if ok else -1).hex())
        peaks.append(peak if nvml else None)
        if args.get("steer"):
            gt.barrier("phase%d" % (i + 1), {"allocated": 6 * size, "nvml_peak": peaks[-1], "nvml_missing": None},
                       measure)
    return {"losses": losses, "allocated": 6 * size, "max_allocated": 6 * size, "nvml_peaks": peaks,
            "nvml_missing": None if nvml else "not sampled", "device_total": sim.meminfo()[1]}


def fake_spill_job(args):
    """test_gvmplot's job: more than its 512M limit in buffers, each written
    every 'step', so the shim spills and swaps."""
    sim = Sim()
    size = 128 * MiB
    bufs = [sim.alloc(size) for _ in range(args["layers"])]
    losses = []
    for step in range(args["steps"]):
        for b in bufs:
            sim.fill(b, step + 1, size)
        ok = all(sim.read(b, 4096) == bytes([step + 1]) * 4096 for b in bufs)
        losses.append(float(step if ok else -1).hex())
    return {"losses": losses, "pid": os.getpid(), "max_allocated": len(bufs) * size}


def fake_baseline(args):
    """test_gvmctl_pause_process's process that allocated nothing."""
    return {"nvml": CONTEXT, "nvml_missing": None, "allocated": 0, "reserved": 0}


def fake_losses(step, ok):
    return float(step if ok else -1).hex()


def fake_steps(sim, bufs, size, step):
    for b in bufs:
        sim.fill(b, step % 251 + 1, size)
    return fake_losses(step, all(sim.read(b, 4096) == bytes([step % 251 + 1]) * 4096 for b in bufs))


def fake_reference(args):
    return {"losses": [fake_losses(step, True) for step in range(args["steps"])]}


def fake_steady_job(args):
    """test_gvmctl_pause_process's job: untagged buffers written every
    step until told to stop; answers measures while it runs."""
    import json
    import threading
    sim = Sim()
    size = 8 * MiB
    bufs = [sim.alloc(size) for _ in range(4)]
    losses, done, lock = [], threading.Event(), threading.Lock()

    def say(line):
        with lock:
            print(line)
            sys.stdout.flush()

    def serve():
        for line in sys.stdin:
            if line.strip() == "go":
                break
            if line.strip() == "measure":
                say("MEASURE " + json.dumps({"nvml": sim.nvml(), "nvml_missing": None, "steps": len(losses)}))
        done.set()

    for _ in range(3):
        losses.append(fake_steps(sim, bufs, size, len(losses)))
    say("AT running {}")
    threading.Thread(target=serve, daemon=True).start()
    while not done.is_set():
        losses.append(fake_steps(sim, bufs, size, len(losses)))
    return {"losses": losses}


def fake_live_limit_job(args):
    """test_torch_live_limit's job: four buffers written every 'step', each
    step timed, a barrier before each phase."""
    import time
    sim = Sim()
    size = 16 * MiB
    bufs = [sim.alloc(size) for _ in range(4)]
    losses, times = [], {}

    def step():
        t0 = time.perf_counter()
        for b in bufs:
            sim.fill(b, len(losses) % 251, size)
        ok = all(sim.read(b, 4096) == bytes([len(losses) % 251]) * 4096 for b in bufs)
        losses.append(float(len(losses) if ok else -1).hex())
        return (time.perf_counter() - t0) * 1e3

    for phase in live_limit.ORDER:
        if args.get("steer"):
            gt.barrier(phase, {"allocated": 4 * size})
        times[phase] = [step() for _ in range(live_limit.TRAIN["phases"][phase])]
    if args.get("steer"):
        gt.barrier("end", {"allocated": 4 * size})
    return {"losses": losses, "times_ms": times, "allocated": 4 * size}


def fake_train(args):
    # test_gvmctl_live, test_gvmplot and test_torch_live_limit call their job "train".
    if "live_limit" in args:
        return fake_live_limit_job(args)
    return fake_spill_job(args) if "layers" in args else fake_train_job(args)


HANDLERS = {"job": fake_pause_job, "train": fake_train, "baseline": fake_baseline, "reference": fake_reference,
            "steady": fake_steady_job}


def main():
    if gt.child_main(HANDLERS):
        return 0
    # The cases start their children as `script --child ...` of their own
    # module: make that this script, whose handlers are the fakes.
    for module in (pause, whole, live, plot, live_limit):
        module.__file__ = os.path.abspath(__file__)
    live_limit.SLACK = 1e9   # the simulated driver's step times say nothing of a GPU's
    try:
        gt.shim_lib()
        gt.gvmctl_path()
    except gt.Failure as e:
        print("FAIL setup: %s" % e)
        print("0 passed, 1 failed")
        return 1
    r = gt.Runner("parents")
    for name, fn in (("pause_keep", pause.case_pause()), ("pause_unmapped", pause.case_pause("--unmapped")),
                     ("pause_discard", pause.case_pause("--discard")),
                     ("whole_process", whole.case_whole_process),
                     ("spill_trace", plot.case_spill_trace), ("lower_then_raise", live.case_lower_then_raise),
                     ("limit_on_then_removed", live_limit.case_limit_on_then_removed)):
        r.run(name, fn)
        r.all_skip = None   # a skip says "nothing here runs" of its own test script only
    return r.finish()


if __name__ == "__main__":
    sys.exit(main())
