#!/usr/bin/env python3
"""Three PyTorch training jobs sharing one GPU's memory (GVM_SHARE=1): their
working sets add up to twice the budget the test sets, and they take turns
being busy (the parent lets one train while the others wait, idle), as
notebooks, an idle inference server beside a trainer, or an RL loop's
rollout engine and trainer do.

Cases:
  losses_equal_native      every job's losses equal its native run's (each
                           alone, no shim)
  nvml_within_budget       the jobs' memory as NVML reports it, sampled
                           every 50 ms by the parent, never exceeds the
                           budget plus their contexts (each job's NVML use
                           less what it holds through gvmshim, once every
                           job has run: kernels load lazily and grow it)
  busy_job_near_native     once a job's memory has come in, its step is at
                           least 0.8 of its native step
  killed_job_frees_share   a job killed with SIGKILL mid-run leaves the
                           shared table, and NVML, within a second; the
                           others go on and finish

Exit 77 without torch, NVML or a GPU.
"""
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402

JOBS = 3
WIDTH = 4096
LAYERS = 4            # 4 x 64 MiB weights, with grads and Adam's two moments ~1 GiB a job
TURNS = 2
STEPS = 60            # per turn; the last 10 are the steady ones
BUDGET = 1536 << 20   # the three working sets are twice this


# ---- a job ---------------------------------------------------------------------


def child_job(args):
    torch = gt.torch_or_skip()
    import torch.nn as nn
    import torch.nn.functional as F

    dev = torch.device("cuda", 0)
    torch.cuda.init()
    torch.zeros(1, device=dev)   # the context exists; nothing else yet
    torch.cuda.synchronize()
    gt.barrier("ready", {"pid": os.getpid()})
    seed = args["seed"]
    torch.manual_seed(seed)
    layers = []
    for _ in range(LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    model = nn.Sequential(*layers[:-1]).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1000 + seed)
    x = torch.randn(256, WIDTH, generator=g).to(dev)
    y = torch.randn(256, WIDTH, generator=g).to(dev)
    losses, turns = [], []
    for turn in range(args.get("turns", TURNS)):
        gt.barrier("turn", {"turn": turn})
        times = []
        for _ in range(args.get("steps", STEPS)):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=False)
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(float(loss.item()).hex())
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        turns.append(times)
    gt.barrier("done")
    return {"losses": losses, "turns": turns}


# ---- NVML in the parent -------------------------------------------------------------


class NvmlSum(threading.Thread):
    """Every 50 ms: the bytes NVML reports for the given pids, summed over
    the GPUs; keeps the peak and each pid's latest figure."""

    def __init__(self):
        super().__init__(daemon=True)
        import ctypes

        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise OSError("nvmlInit failed")
        n = ctypes.c_uint()
        self.lib.nvmlDeviceGetCount_v2(ctypes.byref(n))
        self.handles = []
        for i in range(n.value):
            h = ctypes.c_void_p()
            self.lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
            self.handles.append(h)

        class Info(ctypes.Structure):
            _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                        ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]

        self.buf = (Info * 256)()
        self.ctypes = ctypes
        self.query = getattr(self.lib, "nvmlDeviceGetComputeRunningProcesses_v3", None) or \
            self.lib.nvmlDeviceGetComputeRunningProcesses_v2
        self.pids = set()
        self.peak = 0
        self.samples = 0
        self.stop_event = threading.Event()

    def used(self):
        per = {}
        for h in self.handles:
            n = self.ctypes.c_uint(len(self.buf))
            if self.query(h, self.ctypes.byref(n), self.buf) != 0:
                continue
            for k in range(n.value):
                u = self.buf[k].usedGpuMemory
                if u < (1 << 63):
                    per[self.buf[k].pid] = per.get(self.buf[k].pid, 0) + int(u)
        return per

    def run(self):
        while not self.stop_event.is_set():
            per = self.used()
            total = sum(v for p, v in per.items() if p in self.pids)
            self.peak = max(self.peak, total)
            self.samples += 1
            time.sleep(0.05)

    def stop(self):
        self.stop_event.set()
        self.join()


# ---- the runs --------------------------------------------------------------------------


def native_run(seed):
    r = gt.run_child(__file__, "job_alone", {"seed": seed}, shim=False, timeout=300,
                     label="job %d alone (native)" % seed)
    return r.result


def child_job_alone(args):
    """The same job without barriers: its native losses and step time."""
    real = gt.barrier
    gt.barrier = lambda *a, **k: None
    try:
        return child_job(args)
    finally:
        gt.barrier = real


def shared_run():
    def run():
        try:
            nv = NvmlSum()
        except OSError as e:
            raise gt.Skip("no NVML in the parent (%s)" % e, everything=True)
        share_dir = tempfile.mkdtemp(prefix="gvm-share-")
        os.chmod(share_dir, 0o700)
        env = {"GVM_SHARE": "1", "GVM_SHARE_BUDGET": str(BUDGET), "GVM_SHARE_DIR": share_dir,
               "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]}
        jobs = [gt.LiveChild(__file__, "job", {"seed": s}, shim=True, env=env, timeout=600, label="job %d" % s)
                for s in range(JOBS)]
        out = {"contexts": {}, "turn_order": [], "kill": None}
        try:
            time.sleep(0.5)
            for j in jobs:
                info = j.at("ready")
                nv.pids.add(info["pid"])
            time.sleep(0.3)
            per = nv.used()
            out["contexts"] = {str(j.pid): per.get(j.pid, 0) for j in jobs}
            nv.start()
            # Each job allocates its model and waits at its first turn.
            for j in jobs:
                j.go()
                j.at("turn")
            killed = jobs[-1]
            for turn in range(TURNS):
                if turn == 1:
                    # Every job has run a turn, and waits: a context grows
                    # as kernels load lazily, so each job's context is
                    # measured now, as NVML's figure less what it holds
                    # through gvmshim (the shared table), once settled.
                    time.sleep(1.5)
                    out["contexts"] = contexts_now(jobs, share_dir, nv, out["contexts"])
                for k, j in enumerate(jobs):
                    if j is killed and turn == TURNS - 1:
                        # The last job is killed in the middle of its turn.
                        j.go()
                        time.sleep(1.0)
                        out["kill"] = kill_and_watch(j, share_dir, nv)
                        continue
                    j.go()   # its turn: the others wait at their barriers, idle
                    j.at("turn" if turn < TURNS - 1 else "done")
                    out["turn_order"].append(k)
            results = []
            for j in jobs:
                if j is killed:
                    continue
                j.go()
                results.append(j.finish().result)
            out["results"] = results
            out["peak"] = nv.peak
            out["samples"] = nv.samples
            return out
        finally:
            nv.stop()
            for j in jobs:
                j.cleanup()
            shutil.rmtree(share_dir, ignore_errors=True)

    return gt.once("shared", run)


def kill_and_watch(j, share_dir, nv):
    """SIGKILL, then how long until the job leaves the shared table and NVML."""
    t0 = time.time()
    os.kill(j.pid, signal.SIGKILL)
    gone_table = gone_nvml = None
    while time.time() - t0 < 10 and (gone_table is None or gone_nvml is None):
        if gone_table is None and not listed(share_dir, j.pid):
            gone_table = time.time() - t0
        if gone_nvml is None and j.pid not in nv.used():
            gone_nvml = time.time() - t0
        time.sleep(0.02)
    nv.pids.discard(j.pid)
    return {"table_s": gone_table, "nvml_s": gone_nvml}


def contexts_now(jobs, share_dir, nv, at_start):
    """Each job's memory outside gvmshim (its context): NVML's figure less
    what the shared table says it holds; never less than at its start."""
    tool = gt.gvmctl_path()
    p = subprocess.run([tool, "share", "--json", "--dir", share_dir], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, timeout=30)
    held = {}
    for d in json.loads(p.stdout.decode() or "[]"):
        for q in d["processes"]:
            held[q["pid"]] = held.get(q["pid"], 0) + q["held"]
    per = nv.used()
    out = {}
    for j in jobs:
        now = per.get(j.pid, 0) - held.get(j.pid, 0)
        out[str(j.pid)] = max(now, at_start.get(str(j.pid), 0))
    print("  contexts after a turn each: %s MiB (at start %s MiB)"
          % ([v >> 20 for v in out.values()], [v >> 20 for v in at_start.values()]))
    return out


def listed(share_dir, pid):
    tool = gt.gvmctl_path()
    p = subprocess.run([tool, "share", "--json", "--dir", share_dir], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, timeout=30)
    try:
        devs = json.loads(p.stdout.decode() or "[]")
    except ValueError:
        return True
    return any(q["pid"] == pid for d in devs for q in d["processes"])


def natives():
    return gt.once("natives", lambda: [native_run(s) for s in range(JOBS)])


def case_losses():
    shared = shared_run()
    for seed, r in enumerate(shared["results"]):
        ref = natives()[seed]["losses"][:len(r["losses"])]
        gt.compare_series(ref, r["losses"], 0.0, "job %d losses" % seed)
        print("  job %d: %d losses bitwise equal to its native run" % (seed, len(r["losses"])))


def case_nvml():
    shared = shared_run()
    ctx = sum(shared["contexts"].values())
    bound = BUDGET + ctx
    print("  NVML peak of the three jobs %.0f MiB over %d samples; budget %d MiB + contexts %.0f MiB = %.0f MiB"
          % (shared["peak"] / 2**20, shared["samples"], BUDGET >> 20, ctx / 2**20, bound / 2**20))
    gt.expect(shared["samples"] > 20, "too few NVML samples (%d)" % shared["samples"])
    gt.expect(shared["peak"] <= bound, "the jobs held %d bytes, past the budget and contexts (%d)"
              % (shared["peak"], bound))


def case_busy_near_native():
    shared = shared_run()
    for seed, r in enumerate(shared["results"]):
        native = statistics.median(natives()[seed]["turns"][0][5:])
        for t, times in enumerate(r["turns"]):
            steady = statistics.median(times[-10:])
            ratio = native / steady
            print("  job %d turn %d: steady step %.1f ms, native %.1f ms (%.2f of native), first step %.0f ms"
                  % (seed, t, steady * 1e3, native * 1e3, ratio, times[0] * 1e3))
            gt.expect(ratio >= 0.8, "job %d turn %d ran at %.2f of its native speed" % (seed, t, ratio))


def case_killed():
    k = shared_run()["kill"]
    print("  after SIGKILL: gone from the shared table in %s s, from NVML in %s s" % (k["table_s"], k["nvml_s"]))
    gt.expect(k["table_s"] is not None and k["table_s"] <= 1.0, "the killed job stayed in the table: %s" % k)
    gt.expect(k["nvml_s"] is not None and k["nvml_s"] <= 1.0, "the killed job's memory stayed in NVML: %s" % k)


def arrival(times, steady):
    """Seconds from a turn's start until its steps run within 1.25x of the
    steady step: how long the newly busy job's memory took to come in."""
    t = 0.0
    for x in times:
        if x <= 1.25 * steady:
            return t
        t += x
    return t


def write_bench(path):
    """The figures scripts/bench share prints (GVM_TEST_BENCH_OUT)."""
    shared = shared_run()
    rows = []
    working_set = LAYERS * WIDTH * WIDTH * 4 * 4
    for seed, r in enumerate(shared["results"]):
        native = statistics.median(natives()[seed]["turns"][0][5:])
        for t, times in enumerate(r["turns"]):
            steady = statistics.median(times[-10:])
            a = arrival(times, steady)
            rows.append({"job": seed, "turn": t, "native_ms": native * 1e3, "steady_ms": steady * 1e3,
                         "arrival_s": a, "arrival_gbps": working_set / a / 1e9 if a > 0 else None})
    with open(path, "w") as f:
        json.dump({"rows": rows, "budget": BUDGET, "working_set": working_set, "jobs": JOBS,
                   "peak": shared["peak"], "contexts": shared["contexts"], "kill": shared["kill"]}, f)


def case_bench_figures():
    """With GVM_TEST_BENCH_OUT set (scripts/bench share, or a gpu run that keeps
    the figures): the table's figures, from the runs the cases made."""
    path = os.environ.get("GVM_TEST_BENCH_OUT")
    if path:
        write_bench(path)
        print("  figures written to %s" % path)


def main():
    return gt.suite_main("share", "torch", {"job": child_job, "job_alone": child_job_alone},
                         [("losses_equal_native", case_losses), ("nvml_within_budget", case_nvml),
                          ("busy_job_near_native", case_busy_near_native),
                          ("killed_job_frees_share", case_killed), ("bench_figures", case_bench_figures)])


if __name__ == "__main__":
    sys.exit(main())
