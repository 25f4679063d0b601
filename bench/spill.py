#!/usr/bin/env python3
"""spill: a training-like PyTorch loop at working sets of 0.8x, 1.25x, 1.5x
and 2x a GVM_DEVICE_LIMIT, under GVM_SPILL=host (and GVM_SPILL=peer with
two GPUs), next to the same working set natively (it fits the GPU: the
"fits" step time) and in cudaMallocManaged memory preferring host (the
unified-memory way to run it).

Every step reads every tensor once: for each weight W (rows x 8192 fp32,
--tensor-mib each) acc += (W @ x).sum(), then acc.item(). With
--workload train, a step is a training step instead: forward through every
weight (loss = sum of (x @ W)^2 means), backward, torch.optim.Adam (its
default implementation); the working set then counts each weight four
times (the weight, its gradient, Adam's two moments), and the managed-
memory comparison is not run (it needs PyTorch's allocator replaced).
--workload train-fused: the same step with Adam(fused=True), one pass over
each weight's four tensors instead of the default's several sweeps;
train-adamw and train-adamw-fused: AdamW, default and fused; train-sgd:
SGD with momentum 0.9 (three tensors a weight: no second moment).
Reported per working set:
  step ms          median of --steps timed steps after --warmup steps
  x fits           step / the native step of the same working set
  off-device/step  max(0, working set - limit): bytes that live off the GPU
                   and every step must read across the link at least once
  bound ms         fits step + off-device/step / measured link bandwidth
  added / bound    (step - fits) / (off-device/step / link): goal <= 1.5
  optimal ms       the fastest any schedule could run this workload's own
                   step: Belady's MIN over the allocations its launches
                   reach (GVM_LAUNCH_LOG of the row's run), its copies
                   both ways at once at the rate measured with both
                   running, against the fits step (scripts/probe/optimal.py;
                   real steps read memory more than once, so the bound
                   above is not reachable and this is the honest yardstick)
  step / optimal   the row's step over that
  moved/step       bytes gvmshim migrated per timed step (stats of a run
                   with warm-up only subtracted from a run with the timed
                   steps, so the set-up's spills do not count)
  checksum         acc of the last step equals the native one

Mode "host-lazy": GVM_SPILL=host with GVM_SPILL_HOST_MAP=lazy (spilled
memory left unmapped until used: a swap pays its copies, not the host
mapping; --no-lazy: not run). Its runs take --lazy-warmup warm-up steps
(default 20) when that is more than --warmup: with lazy spills the
prefetch thread's trial times the program's first steps with and without
it and keeps the faster only after about 15 (policy/trial.c), so fewer
warm-up steps would time the trial, not what a long job runs at.
With --workload train or train-fused every run takes that many: their
checksum is the last step's loss, which the native run reaches only after
as many steps.

One more row, mode "host+trace": the host configuration nearest 1.5x the
limit again with GVM_TRACE set, its step time beside the untraced one
(what the timeline costs a spilling job) and the trace file's size
(--no-trace: not run).

The parent never imports torch: each configuration is a child process.
Prints a table and one line "BENCH_JSON {...}" for scripts/bench.
Exit 77 without torch or a GPU.

    bench/spill.py --lib build/preload/libgvmshim.so [--limit 4G]
                   [--ratios 0.8,1.25,1.5,2] [--no-peer] [--no-managed]
                   [--no-diff] [--no-trace] [--no-lazy] [--lazy-warmup 20] [--deadline 240]
                   [--shim-env GVM_X=V]
                   [--workload read|train|train-fused|train-adamw|train-adamw-fused|train-sgd]
"""
import argparse
import ctypes
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

MiB, GiB = 1 << 20, 1 << 30
COLS = 8192


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": MiB, "G": GiB, "T": 1 << 40}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def host_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


# ---- children ------------------------------------------------------------------


class Managed:
    """cudaMallocManaged-style memory from the driver (ctypes on libcuda),
    preferring host, accessed by device 0, shown to torch through
    __cuda_array_interface__."""

    def __init__(self, nbytes, rows):
        self.lib = ctypes.CDLL("libcuda.so.1")
        ptr = ctypes.c_uint64(0)
        rc = self.lib.cuMemAllocManaged(ctypes.byref(ptr), ctypes.c_size_t(nbytes), ctypes.c_uint(1))
        if rc != 0:
            raise RuntimeError("cuMemAllocManaged(%d) -> %d" % (nbytes, rc))
        self.ptr = ptr.value
        self.nbytes = nbytes
        self._advise(3, host=True)   # CU_MEM_ADVISE_SET_PREFERRED_LOCATION: host
        self._advise(5, host=False)  # CU_MEM_ADVISE_SET_ACCESSED_BY: device 0
        self.__cuda_array_interface__ = {"shape": (rows, COLS), "typestr": "<f4", "data": (self.ptr, False),
                                         "version": 3, "strides": None}

    def _advise(self, advice, host):
        class Loc(ctypes.Structure):
            _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]

        v2 = getattr(self.lib, "cuMemAdvise_v2", None)
        if v2 is not None:
            # CU_MEM_LOCATION_TYPE_HOST = 2, _DEVICE = 1
            loc = Loc(2, 0) if host else Loc(1, 0)
            rc = v2(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.nbytes), ctypes.c_int(advice), loc)
        else:
            rc = self.lib.cuMemAdvise(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.nbytes), ctypes.c_int(advice),
                                      ctypes.c_int(-1 if host else 0))
        if rc != 0:
            raise RuntimeError("cuMemAdvise(advice %d) -> %d" % (advice, rc))

    def free(self):
        if self.ptr:
            self.lib.cuMemFree_v2(ctypes.c_uint64(self.ptr))
            self.ptr = 0


def run_working_set(torch, ws_bytes, tensor_bytes, steps, warmup, managed, side=0):
    """side: each step also queues this many 2048x2048 fp32 GEMMs on a
    second stream first (work that uses none of the weights: a swap need
    not wait for it), and ends when both streams are done."""
    dev = torch.device("cuda", 0)
    rows = tensor_bytes // (4 * COLS)
    n = max(1, int(round(ws_bytes / float(tensor_bytes))))
    g = torch.Generator(device=dev)
    g.manual_seed(5)
    x = torch.randn(COLS, 64, device=dev, generator=g)
    tensors, holders = [], []
    t0 = time.time()
    for _ in range(n):
        if managed:
            h = Managed(rows * COLS * 4, rows)
            holders.append(h)
            t = torch.as_tensor(h, device=dev)
        else:
            t = torch.empty(rows, COLS, device=dev)
        t.uniform_(-1, 1, generator=g)
        tensors.append(t)
    if side:
        side_stream = torch.cuda.Stream()
        sa, sb = (torch.randn(2048, 2048, device=dev) for _ in range(2))
        sc = torch.empty_like(sa)
    torch.cuda.synchronize()
    setup_s = time.time() - t0
    times, acc, acc_v = [], None, None
    for i in range(warmup + steps):
        s0 = time.time()
        if side:
            with torch.cuda.stream(side_stream):
                for _ in range(side):
                    torch.matmul(sa, sb, out=sc)
        acc = torch.zeros((), device=dev)
        for t in tensors:
            acc += (t @ x).sum()
        acc_v = float(acc.item())
        if side:
            side_stream.synchronize()
        if i >= warmup:
            times.append(time.time() - s0)
    res = {"tensors": n, "ws_bytes": n * rows * COLS * 4, "setup_s": setup_s, "step_s": times,
           "checksum": acc_v.hex() if acc_v is not None else None}
    t = None
    del tensors, acc, x, t
    torch.cuda.synchronize()
    for h in holders:
        h.free()
    torch.cuda.empty_cache()
    return res


# The training step's optimizers: the constructor's name in torch.optim,
# its arguments, and the tensors each weight brings (weight, gradient and
# the optimizer's state).
OPTIMIZERS = {
    "adam": ("Adam", {}, 4),
    "adam-fused": ("Adam", {"fused": True}, 4),
    "adamw": ("AdamW", {}, 4),
    "adamw-fused": ("AdamW", {"fused": True}, 4),
    "sgd": ("SGD", {"momentum": 0.9}, 3),
}
WORKLOADS = {"train": "adam", "train-fused": "adam-fused", "train-adamw": "adamw",
             "train-adamw-fused": "adamw-fused", "train-sgd": "sgd"}


def training_set(torch, rows, n, fused, optimizer=None):
    """The training step's input, n weights of rows x COLS fp32 (seeded:
    every run starts from the same values) and its optimizer (a key of
    OPTIMIZERS; else Adam, fused or not). Also what scripts/probe/ runs,
    so that they probe this very step."""
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev)
    g.manual_seed(5)
    x = torch.randn(64, rows, device=dev, generator=g)
    params = []
    for _ in range(n):
        w = torch.empty(rows, COLS, device=dev)
        w.uniform_(-0.01, 0.01, generator=g)
        params.append(torch.nn.Parameter(w))
    name, kwargs, _ = OPTIMIZERS[optimizer or ("adam-fused" if fused else "adam")]
    opt = getattr(torch.optim, name)(params, lr=1e-4, **kwargs)
    return x, params, opt


def training_step(x, params, opt):
    """One step: forward through every weight, backward, Adam; its loss."""
    opt.zero_grad(set_to_none=False)
    loss = sum((x @ w).square().mean() for w in params)
    loss.backward()
    opt.step()
    return float(loss.item())


def run_training_set(torch, ws_bytes, tensor_bytes, steps, warmup, managed, fused=False, optimizer=None):
    """Training steps: forward through every weight, backward, Adam. The
    working set counts each weight four times: the weight, its gradient and
    Adam's two moments (created by the first step, a warm-up step). fused:
    Adam(fused=True), one pass over each weight's four tensors where the
    default (foreach) implementation sweeps the moments several times."""
    if managed:
        raise RuntimeError("not run for the training step (it needs PyTorch's allocator replaced)")
    rows = tensor_bytes // (4 * COLS)
    per_weight = OPTIMIZERS[optimizer or ("adam-fused" if fused else "adam")][2]
    n = max(1, int(round(ws_bytes / (float(per_weight) * tensor_bytes))))
    t0 = time.time()
    x, params, opt = training_set(torch, rows, n, fused, optimizer)
    torch.cuda.synchronize()
    setup_s = time.time() - t0
    times, loss_v = [], None
    for i in range(warmup + steps):
        s0 = time.time()
        loss_v = training_step(x, params, opt)
        if i >= warmup:
            times.append(time.time() - s0)
    res = {"tensors": n, "ws_bytes": per_weight * n * rows * COLS * 4, "setup_s": setup_s, "step_s": times,
           "checksum": loss_v.hex() if loss_v is not None else None}
    del opt, params, x
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return res


def measure_links(torch, peer):
    dev = torch.device("cuda", 0)
    n = GiB
    out = {}
    pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    d = torch.empty(n, dtype=torch.uint8, device=dev)

    # The best of 8: the bound is the least time the step could take, so it
    # uses the fastest the link was seen to run. A median let one slow
    # stretch of the host (H2D read 34.7 GB/s once on a host that gives 54)
    # lower the link and flatter every ratio of the table.
    def bw(fn):
        fn()
        torch.cuda.synchronize()
        v = []
        for _ in range(8):
            t0 = time.time()
            fn()
            torch.cuda.synchronize()
            v.append(n / (time.time() - t0) / 1e9)
        return max(v)

    out["h2d_gbps"] = bw(lambda: d.copy_(pinned, non_blocking=True))
    out["d2h_gbps"] = bw(lambda: pinned.copy_(d, non_blocking=True))
    # Both directions at once, each on its own stream and buffers: the
    # yardstick's duplex rate (scripts/probe/optimal.py). Each direction
    # moved n bytes in the time both took.
    pinned2 = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    d2 = torch.empty(n, dtype=torch.uint8, device=dev)
    up, down = torch.cuda.Stream(), torch.cuda.Stream()

    def both():
        with torch.cuda.stream(up):
            d.copy_(pinned, non_blocking=True)
        with torch.cuda.stream(down):
            pinned2.copy_(d2, non_blocking=True)

    out["duplex_gbps"] = bw(both)
    del pinned2, d2
    if peer:
        d1 = torch.empty(n, dtype=torch.uint8, device=torch.device("cuda", 1))
        out["peer_gbps"] = bw(lambda: d1.copy_(d, non_blocking=True))
        del d1
    del pinned, d
    torch.cuda.empty_cache()
    return out


def child(args):
    try:
        import torch
    except ImportError:
        print("SKIP no torch")
        sys.stdout.flush()
        os._exit(77)
    if not torch.cuda.is_available():
        print("SKIP no GPU")
        sys.stdout.flush()
        os._exit(77)
    torch.backends.cuda.matmul.allow_tf32 = False
    free, total = torch.cuda.mem_get_info(0)
    res = {"device": torch.cuda.get_device_name(0), "devices": torch.cuda.device_count(), "free": free,
           "total": total, "torch": torch.__version__, "runs": []}
    peer = (torch.cuda.device_count() >= 2 and torch.cuda.can_device_access_peer(0, 1)
            and torch.cuda.can_device_access_peer(1, 0))
    res["peer"] = bool(peer)
    if args.get("links"):
        res["links"] = measure_links(torch, peer)
    for ws in args["ws"]:
        if args.get("check_free"):
            free, _ = torch.cuda.mem_get_info(0)
            if ws + GiB > free:
                res["runs"].append({"ws_request": ws, "skipped": "%d MiB free on the GPU" % (free // MiB)})
                continue
        try:
            if args.get("train"):
                r = run_training_set(torch, ws, args["tensor_bytes"], args["steps"], args["warmup"],
                                     args.get("managed", False), fused=args.get("fused", False),
                                     optimizer=args.get("optimizer"))
            else:
                r = run_working_set(torch, ws, args["tensor_bytes"], args["steps"], args["warmup"],
                                    args.get("managed", False), side=args.get("side", 0))
        except RuntimeError as e:
            if not args.get("managed"):
                raise
            r = {"skipped": "managed memory: %s" % e}
            torch.cuda.empty_cache()
        r["ws_request"] = ws
        res["runs"].append(r)
    print("RESULT " + json.dumps(res))
    sys.stdout.flush()
    return 0


# ---- the parent ----------------------------------------------------------------


def clean_env():
    e = {k: v for k, v in os.environ.items() if not k.startswith("GVM_") or k.startswith("GVM_TEST_")}
    e.pop("LD_PRELOAD", None)
    e.pop("PYTORCH_NO_CUDA_MEMORY_CACHING", None)
    e["PYTHONUNBUFFERED"] = "1"
    return e


class Parent:
    def __init__(self, opts):
        self.o = opts
        self.t_start = time.time()
        self.notes = []

    def out_of_time(self):
        return time.time() - self.t_start > self.o.deadline

    def run(self, label, args, shim_env=None, timeout=180, launch_log=None):
        if self.out_of_time():
            self.notes.append("%s: not run (past the %d s deadline)" % (label, self.o.deadline))
            return None, None
        env = clean_env()
        stats_path = None
        if shim_env is not None:
            shim_env = dict(shim_env, **dict(kv.split("=", 1) for kv in self.o.shim_env))
            fd, stats_path = tempfile.mkstemp(prefix="gvm-spill-", suffix=".json")
            os.close(fd)
            os.unlink(stats_path)
            env["LD_PRELOAD"] = self.o.lib
            env["GVM_STATS"] = stats_path
            if launch_log:
                env["GVM_LAUNCH_LOG"] = launch_log
            env.update(shim_env)
        cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(args)]
        shown = " ".join("%s=%s" % kv for kv in sorted((shim_env or {}).items()))
        sys.stderr.write("spill: %s %s\n" % (label, shown))
        sys.stderr.flush()
        try:
            p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.notes.append("%s: killed after %d s" % (label, timeout))
            return None, None
        text = p.stdout.decode("utf-8", "replace")
        if p.returncode == 77:
            return "skip", text
        result = None
        for line in text.splitlines():
            if line.startswith("RESULT "):
                result = json.loads(line[7:])
        if p.returncode != 0 or result is None:
            tail = "\n".join(text.strip().splitlines()[-15:])
            self.notes.append("%s: failed (exit %d): %s" % (label, p.returncode, tail.replace("\n", " | ")))
            return None, None
        stats = None
        if stats_path:
            if os.path.exists(stats_path):
                with open(stats_path) as f:
                    stats = json.load(f)
                os.unlink(stats_path)
            else:
                self.notes.append("%s: the shim wrote no stats" % label)
        return result, stats


def compare_to_fit(row, fit, limit, link):
    """The row's step against the same working set natively and the link's bound."""
    if not fit.get("step_s"):
        return
    row["fit_ms"] = 1e3 * median(fit["step_s"])
    row["ratio_to_fit"] = row["step_ms"] / row["fit_ms"] if row["fit_ms"] > 0 else None
    off = max(0, row["ws_bytes"] - limit)
    row["off_device_bytes"] = off
    if link and off > 0:
        lb_extra_ms = off / (link * 1e9) * 1e3
        row["bound_ms"] = row["fit_ms"] + lb_extra_ms
        row["added_over_bound"] = (row["step_ms"] - row["fit_ms"]) / lb_extra_ms


def load_optimal():
    """scripts/probe/optimal.py, the yardstick, imported by path."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "probe", "optimal.py")
    spec = importlib.util.spec_from_file_location("gvm_optimal", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def yardstick_link(mode, links):
    """The link a mode's spills cross, for the yardstick: host modes, H2D
    and D2H with the rate measured with both running; peer, the peer rate
    each way at once (NVLink and PCIe are full duplex; not measured)."""
    if mode.startswith("peer"):
        if not links.get("peer_gbps"):
            return None
        return {"h2d": links["peer_gbps"], "d2h": links["peer_gbps"]}
    if not links.get("h2d_gbps") or not links.get("d2h_gbps"):
        return None
    link = {"h2d": links["h2d_gbps"], "d2h": links["d2h_gbps"]}
    if links.get("duplex_gbps"):
        link["h2d_duplex"] = link["d2h_duplex"] = links["duplex_gbps"]
    return link


def compare_to_optimal(row, log, limit, link, notes, steps_run):
    """The row's step against the optimal schedule of the same workload's
    own launch sequence (Belady's MIN, copies both ways at once,
    scripts/probe/optimal.py), from the launch log of a run of it."""
    if not row.get("fit_ms") or not link:
        return
    if not log or not os.path.exists(log):
        notes.append("%s %.2fx: no launch log, no optimal step" % (row["mode"], row["ratio"]))
        return
    try:
        # To a peer, kernels read spilled data in place (swap_in=host): the
        # yardstick may too.
        # About how many launches a step makes, so a loop found spanning
        # two steps (buffers alternating) counts per step.
        per_step = row.get("launches_scanned", 0) / float(steps_run) if steps_run else None
        y = load_optimal().from_log(log, limit, row["fit_ms"], link, bypass=row["mode"].startswith("peer"),
                                    step_launches=per_step or None)
    except (OSError, ValueError) as e:
        notes.append("%s %.2fx: optimal step not computed: %s" % (row["mode"], row["ratio"], e))
        return
    if y["log"]["partial"] or y["log"]["dropped"]:
        notes.append("%s %.2fx: the launch log has %d launches scanned in part, %d records dropped"
                     % (row["mode"], row["ratio"], y["log"]["partial"], y["log"]["dropped"]))
    row.update({"optimal_ms": y["optimal_ms"], "ratio_to_optimal": row["step_ms"] / y["optimal_ms"],
                "min_in_bytes": y["min_in_bytes"], "min_out_bytes": y["min_out_bytes"],
                "lru_in_bytes": y["lru_in_bytes"], "loop_launches": y["launches"], "loop_steps": y["steps_per_period"],
                "period_miss": y["period_miss"]})


def traced_row(par, base, rows, native_by_ws, env, limit):
    """The host row nearest 1.5x the limit, run again with GVM_TRACE set."""
    done = [r for r in rows if r["mode"] == "host" and r["ratio"] > 1 and "step_ms" in r]
    if not done:
        return None
    plain = min(done, key=lambda r: abs(r["ratio"] - 1.5))
    tmp = tempfile.mkdtemp(prefix="gvm-spill-trace-")
    trace = os.path.join(tmp, "trace.json")
    row = {"mode": "host+trace", "ratio": plain["ratio"], "ws_request": plain["ws_request"], "limit": limit,
           "link_gbps": plain["link_gbps"], "untraced_step_ms": plain["step_ms"]}
    try:
        full, st = par.run("host %.2fx with GVM_TRACE" % plain["ratio"], dict(base, ws=[plain["ws_request"]]),
                           dict(env, GVM_TRACE=trace))
        if os.path.exists(trace):
            row["trace_bytes"] = os.path.getsize(trace)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not isinstance(full, dict) or not full["runs"]:
        row["skipped"] = "failed or not run"
        return row
    r = full["runs"][0]
    fit = native_by_ws.get(plain["ws_request"], {})
    row.update({"tensors": r["tensors"], "ws_bytes": r["ws_bytes"], "step_ms": 1e3 * median(r["step_s"]),
                "setup_s": r["setup_s"],
                "checksum_ok": (fit.get("checksum") == r["checksum"]) if fit.get("checksum") else None})
    if st:
        row.update({k: st.get(k, 0) for k in ("spills", "bytes_migrated", "migrations_failed")})
        row["moved_per_step"] = st.get("bytes_migrated", 0) / float(base["steps"] + base["warmup"])
        row["moved_includes_setup"] = True
    compare_to_fit(row, fit, limit, plain["link_gbps"])
    return row


def median(xs):
    xs = sorted(xs)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--lib", default=os.environ.get("GVM_TEST_LIB", "build/preload/libgvmshim.so"))
    ap.add_argument("--limit", default="4G", help="GVM_DEVICE_LIMIT of the shim runs [4G]")
    ap.add_argument("--ratios", default="0.8,1.25,1.5,2", help="working sets as multiples of the limit")
    ap.add_argument("--tensor-mib", type=int, default=128, help="size of each weight tensor [128]")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--no-peer", action="store_true", help="skip GVM_SPILL=peer even with two GPUs")
    ap.add_argument("--no-managed", action="store_true", help="skip the cudaMallocManaged comparison")
    ap.add_argument("--no-diff", action="store_true",
                    help="moved/step from one run (includes the set-up's spills), half the runs")
    ap.add_argument("--no-trace", action="store_true", help="skip the run with GVM_TRACE set")
    ap.add_argument("--no-lazy", action="store_true", help="skip GVM_SPILL=host with GVM_SPILL_HOST_MAP=lazy")
    ap.add_argument("--lazy-warmup", type=int, default=20,
                    help="warm-up steps of the host-lazy runs when more than --warmup (the prefetch's trial) [20]")
    ap.add_argument("--deadline", type=int, default=240, help="start no run after this many seconds [240]")
    ap.add_argument("--workload", choices=["read"] + sorted(WORKLOADS), default="read",
                    help="read: every weight read once a step; train: forward, backward, Adam; "
                         "train-fused: the same with Adam(fused=True); train-adamw, train-adamw-fused, "
                         "train-sgd: AdamW, fused AdamW, SGD with momentum [read]")
    ap.add_argument("--shim-env", action="append", default=[], metavar="GVM_X=V",
                    help="one more setting for every shim run (repeatable), to try options")
    o = ap.parse_args()
    if o.child:
        return child(json.loads(o.child))
    if o.steps < 1 or o.warmup < 0 or o.lazy_warmup < 0:
        ap.error("--steps must be >= 1, --warmup and --lazy-warmup >= 0")

    if importlib.util.find_spec("torch") is None:
        print("spill: no torch (import torch fails): skipped")
        return 77
    o.lib = os.path.abspath(o.lib)
    if not os.path.exists(o.lib):
        print("spill: %s does not exist (build first, or --lib)" % o.lib)
        return 2
    limit = parse_size(o.limit)
    ratios = [float(r) for r in o.ratios.split(",") if r.strip()]
    tensor_bytes = o.tensor_mib * MiB
    if tensor_bytes % (4 * COLS):
        print("spill: --tensor-mib must give whole rows of %d floats" % COLS)
        return 2
    par = Parent(o)
    ws_list = [int(r * limit) for r in ratios]
    base = {"tensor_bytes": tensor_bytes, "steps": o.steps, "warmup": o.warmup,
            "train": o.workload.startswith("train"), "fused": o.workload == "train-fused",
            "optimizer": WORKLOADS.get(o.workload)}
    if o.workload.startswith("train") and o.warmup < 1:
        ap.error("--workload train needs --warmup >= 1 (the first step creates Adam's state)")
    lazy_warmup = max(o.warmup, o.lazy_warmup)
    if base["train"] and not o.no_lazy:
        base["warmup"] = lazy_warmup   # the losses compare only after as many steps

    native, _ = par.run("native (fits)", dict(base, ws=ws_list, links=True, check_free=True))
    if native == "skip":
        print("spill: no GPU: skipped")
        return 77
    if native is None:
        print("spill: the native run failed:\n  " + "\n  ".join(par.notes))
        return 1
    links = native.get("links", {})
    avail = host_available()

    def host_ok(ws, label):
        if avail is not None and avail < ws + 4 * GiB:
            par.notes.append("%s at %.1f GiB: skipped, %.1f GiB host memory available" % (label, ws / GiB, avail / GiB))
            return False
        return True

    modes = [("host", {"GVM_DEVICE_LIMIT": o.limit, "GVM_SPILL": "host"}, links.get("h2d_gbps"))]
    if not o.no_lazy:
        modes.append(("host-lazy", {"GVM_DEVICE_LIMIT": o.limit, "GVM_SPILL": "host", "GVM_SPILL_HOST_MAP": "lazy"},
                      links.get("h2d_gbps")))
    if native.get("peer") and not o.no_peer:
        modes.append(("peer", {"GVM_DEVICE_LIMIT": "0:" + o.limit, "GVM_SPILL": "peer"}, links.get("peer_gbps")))
    elif native.get("devices", 1) >= 2 and not o.no_peer:
        par.notes.append("peer: GPUs 0 and 1 have no peer access; GVM_SPILL=peer not run")

    rows = []
    native_by_ws = {r["ws_request"]: r for r in native["runs"]}
    for mode, env, link in modes:
        mbase = dict(base, warmup=lazy_warmup) if mode == "host-lazy" else base
        for ratio, ws in zip(ratios, ws_list):
            fit = native_by_ws.get(ws, {})
            row = {"mode": mode, "ratio": ratio, "ws_request": ws, "limit": limit, "link_gbps": link}
            rows.append(row)
            if mode.startswith("host") and ratio > 1 and not host_ok(ws, mode):
                row["skipped"] = "host memory"
                continue
            label = "%s %.2fx" % (mode, ratio)
            # The launch log of the timed run itself (its warm-up and timed
            # steps: enough repeats to find the step; logging adds a few
            # stores per launch and writes at exit).
            logdir = tempfile.mkdtemp(prefix="gvm-spill-log-")
            log = os.path.join(logdir, "launches.bin")
            full, st = par.run(label, dict(mbase, ws=[ws]), env, launch_log=log)
            if not isinstance(full, dict) or not full["runs"]:
                row["skipped"] = "failed or not run"
                shutil.rmtree(logdir, ignore_errors=True)
                continue
            r = full["runs"][0]
            row.update({"tensors": r["tensors"], "ws_bytes": r["ws_bytes"], "step_ms": 1e3 * median(r["step_s"]),
                        "setup_s": r["setup_s"],
                        "checksum_ok": (fit.get("checksum") == r["checksum"]) if fit.get("checksum") else None})
            if st:
                row.update({k: st.get(k, 0) for k in ("spills", "spilled_bytes", "promotions", "promoted_bytes",
                                                       "bytes_migrated", "migrations_failed", "launches_scanned",
                                                       "loops_learned", "prefetches", "swap_handoffs")})
                # The ratios assume the device held no more than the limit: record what it held.
                row["held_peak_dev0"] = (st.get("held_peak") or {}).get("0")
                moved = st.get("bytes_migrated", 0)
                if not o.no_diff and ratio > 1:
                    setup, st0 = par.run(label + " (warm-up only)", dict(mbase, ws=[ws], steps=0), env)
                    if isinstance(setup, dict) and st0:
                        row["moved_per_step"] = max(0, moved - st0.get("bytes_migrated", 0)) / float(o.steps)
                if "moved_per_step" not in row:
                    row["moved_per_step"] = moved / float(o.steps + mbase["warmup"])
                    row["moved_includes_setup"] = True
            compare_to_fit(row, fit, limit, link)
            compare_to_optimal(row, log, limit, yardstick_link(mode, links), par.notes, o.steps + mbase["warmup"])
            shutil.rmtree(logdir, ignore_errors=True)

    if not o.no_trace:
        row = traced_row(par, base, rows, native_by_ws, modes[0][1], limit)
        if row:
            rows.append(row)

    managed = None
    if not o.no_managed:
        managed, _ = par.run("managed (preferred location host)",
                             dict(base, ws=ws_list, managed=True, check_free=True))
        if isinstance(managed, dict):
            by = {r["ws_request"]: r for r in managed["runs"]}
            for row in rows:
                if row["mode"].endswith("+trace"):
                    continue
                m = by.get(row["ws_request"])
                if m and m.get("step_s"):
                    row["managed_ms"] = 1e3 * median(m["step_s"])
                    fit = native_by_ws.get(row["ws_request"], {})
                    row["managed_checksum_ok"] = (fit.get("checksum") == m["checksum"]) if fit.get("checksum") else None
                elif m and m.get("skipped"):
                    row["managed_skipped"] = m["skipped"]

    fits = []
    for r in native["runs"]:
        fits.append({"ws_request": r["ws_request"], "ws_bytes": r.get("ws_bytes"),
                     "step_ms": 1e3 * median(r["step_s"]) if r.get("step_s") else None,
                     "skipped": r.get("skipped")})

    # A plain table for people running this by hand.
    print("device %s, workload %s, limit %s, tensors of %d MiB, link H2D %.1f GB/s%s"
          % (native["device"], o.workload, o.limit, o.tensor_mib, links.get("h2d_gbps", 0),
             ", peer %.1f GB/s" % links["peer_gbps"] if links.get("peer_gbps") else ""))
    print("%-10s %6s %9s %9s %9s %8s %10s %9s %9s %7s %9s %5s"
          % ("spill", "x lim", "WS GiB", "step ms", "fits ms", "x fits", "moved GiB", "add/bnd", "opt ms", "x opt",
             "UVM ms", "ok"))
    for row in rows:
        if row.get("skipped") or "step_ms" not in row:
            print("%-10s %6.2f  skipped (%s)" % (row["mode"], row["ratio"], row.get("skipped", "?")))
            continue
        f = lambda v, fmt: (fmt % v) if isinstance(v, (int, float)) else "-"  # noqa: E731
        print("%-10s %6.2f %9.2f %9.1f %9s %8s %10s %9s %9s %7s %9s %5s"
              % (row["mode"], row["ratio"], row["ws_bytes"] / GiB, row["step_ms"], f(row.get("fit_ms"), "%.1f"),
                 f(row.get("ratio_to_fit"), "%.2f"), f(row.get("moved_per_step", 0) / GiB, "%.2f"),
                 f(row.get("added_over_bound"), "%.2f"), f(row.get("optimal_ms"), "%.1f"),
                 f(row.get("ratio_to_optimal"), "%.2f"), f(row.get("managed_ms"), "%.1f"),
                 {True: "yes", False: "NO", None: "-"}[row.get("checksum_ok")]))
    for n in par.notes:
        print("note: " + n)
    out = {"bench": "spill", "device": native["device"], "devices": native.get("devices"), "torch": native.get("torch"),
           "workload": o.workload, "limit": limit, "limit_text": o.limit, "tensor_bytes": tensor_bytes,
           "steps": o.steps, "warmup": base["warmup"], "lazy_warmup": lazy_warmup if not o.no_lazy else None,
           "links": links, "fits": fits, "rows": rows, "notes": par.notes,
           "managed_ran": isinstance(managed, dict), "seconds": time.time() - par.t_start}
    print("BENCH_JSON " + json.dumps(out))
    sys.stdout.flush()
    bad = any(row.get("checksum_ok") is False or row.get("managed_checksum_ok") is False for row in rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
