#!/usr/bin/env python3
"""GVM_DEVICE_LIMIT as NVML sees it: a PyTorch training loop whose working
set is 1.25x, 1.5x and 2x the limit runs under the shim while a thread
samples, through NVML, the device memory this process holds. The sampled
peak must stay within the limit plus the process's own overhead (the CUDA
context, libraries' kernels: measured from a run that allocates nothing
through gvmshim) plus one transfer piece (block_size, 64 MiB); losses are
bit for bit those of the native run.

  limit_host_1_25x, _1_5x, _2x   GVM_SPILL=host
  limit_host_lazy_1_5x           GVM_SPILL=host, GVM_SPILL_HOST_MAP=lazy:
                                 spilled memory left unmapped until used
  limit_peer_1_5x                (2 GPUs) GVM_SPILL=peer,host: GPU 0 holds
                                 its limit, GPU 1 takes what leaves
  limit_async_1_5x               PyTorch's cudaMallocAsync backend: its
                                 stream-ordered allocations are gvmshim's,
                                 held to the limit and spilled like any
  limit_expandable               expandable_segments: PyTorch's own
                                 cuMemCreate memory counts under the limit
                                 (it cannot move): a job that fits runs
                                 within it; one that does not gets
                                 PyTorch's out-of-memory error, NVML never
                                 past the limit

NVML through pynvml where installed, else ctypes on libnvidia-ml.so.1.
Exit 77 without torch, a GPU or an NVML that lists this process.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402
from gvmnvml import start_sampler  # noqa: E402

MiB, GiB = gt.MiB, gt.GiB
PIECE = 64 * MiB            # one transfer piece: GVM_BLOCK_SIZE's default
TRAIN = {"layers": 6, "dim": 8192, "batch": 256, "steps": 8, "lr": 0.1}


# ---- children ----------------------------------------------------------------------


def train(torch, layers, d, batch, steps, lr):
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev)
    g.manual_seed(1234)
    ws = [(torch.randn(d, d, device=dev, generator=g) / d ** 0.5).requires_grad_() for _ in range(layers)]
    x = torch.randn(batch, d, device=dev, generator=g)
    target = torch.randn(batch, d, device=dev, generator=g)
    losses = []
    for _ in range(steps):
        h = x
        for w in ws:
            h = torch.tanh(h @ w)
        loss = ((h - target) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for w in ws:
                w.sub_(lr * w.grad)
                w.grad = None
        losses.append(float(loss.item()).hex())
    torch.cuda.synchronize()
    return losses


def child_train(args):
    """The training loop, sampled. With small=True, the same kernels on a
    tiny problem: what the process holds besides its data (overhead)."""
    torch = gt.torch_or_skip()
    if args.get("need_free"):
        free, _ = torch.cuda.mem_get_info(0)
        if free < args["need_free"]:
            gt.child_skip("not enough GPU memory: %d MiB free" % (free // MiB))
    torch.zeros(1, device="cuda:0")          # the context, before the first sample
    if args.get("peer") and torch.cuda.device_count() >= 2:
        torch.zeros(1, device="cuda:1")
    sampler = start_sampler(torch)
    p = dict(TRAIN)
    if args.get("small"):
        p.update(dim=256, batch=16, steps=2)
    try:
        losses = train(torch, p["layers"], p["dim"], p["batch"], p["steps"], p["lr"])
    except torch.cuda.OutOfMemoryError:
        if not args.get("catch_oom"):
            raise
        sampler.stop()
        return {"oom": True, "nvml_peak": sampler.peak, "samples": sampler.samples}
    sampler.stop()
    return {"oom": False, "losses": losses, "max_allocated": torch.cuda.max_memory_allocated(0),
            "nvml_peak": sampler.peak, "samples": sampler.samples, "device_count": torch.cuda.device_count(),
            "peer": bool(torch.cuda.device_count() >= 2 and torch.cuda.can_device_access_peer(0, 1))}


HANDLERS = {"train": child_train}


# ---- the parent --------------------------------------------------------------------



def native():
    return gt.once("native", lambda: gt.run_child(__file__, "train", {"need_free": 6 * GiB}, shim=False))


def overhead(env):
    """NVML's peak of the same process doing (almost) nothing through
    gvmshim, under the same settings."""
    key = "overhead " + repr(sorted(env.items()))
    got = gt.once(key, lambda: gt.run_child(__file__, "train", {"small": True, "peer": True}, shim=True, env=env,
                                         label="overhead (shim)"))
    return got.result["nvml_peak"]


def limit_for(ratio):
    return int(native().result["max_allocated"] / ratio) // (2 * MiB) * (2 * MiB)


def limited_run(ratio, spill, peer=False, extra=None):
    ref = native()
    need = ref.result["max_allocated"]
    limit = limit_for(ratio)
    env = dict(extra or {}, GVM_DEVICE_LIMIT="0:%d" % limit, GVM_SPILL=spill)
    over = overhead(env)
    got = gt.run_child(__file__, "train", {"peer": peer}, shim=True, env=env,
                       label="train at %.2fx (shim, spill=%s)" % (ratio, spill))
    worst = gt.compare_series(ref.result["losses"], got.result["losses"], 0.0, "losses")
    peak, st = got.result["nvml_peak"], got.stats
    allowed = limit + over[0] + PIECE
    print("  job %.2f GiB, limit %.2f GiB; NVML peak on GPU 0 %.2f GiB (overhead %.0f MiB, allowed %.2f GiB, "
          "%d samples); held_peak %s; spills %d, promotions %d; losses bitwise%s"
          % (need / GiB, limit / GiB, peak[0] / GiB, over[0] / MiB, allowed / GiB, got.result["samples"],
             st.get("held_peak"), st["spills"], st["promotions"], "" if worst == 0 else " (NOT)"))
    gt.expect(st["spills"] > 0, "no spill at %.2fx the limit" % ratio)
    gt.expect(peak[0] <= allowed, "GPU 0 held %.0f MiB by NVML, over the limit %.0f MiB + overhead %.0f MiB + "
              "one piece" % (peak[0] / MiB, limit / MiB, over[0] / MiB))
    gt.expect(int(st["held_peak"]["0"]) <= limit, "gvmshim held %s bytes at peak on GPU 0, limit %d"
              % (st["held_peak"]["0"], limit))
    gt.expect(st["alloc_failures"] == 0, "%d allocations failed" % st["alloc_failures"])
    return got


def case_host(ratio):
    return lambda: limited_run(ratio, "host")


def case_host_lazy():
    got = limited_run(1.5, "host", extra={"GVM_SPILL_HOST_MAP": "lazy"})
    gt.expect(got.stats["promotions"] > 0, "nothing came back from host")


def case_peer():
    ref = native()
    if ref.result["device_count"] < 2:
        raise gt.Skip("needs 2 GPUs (have %d)" % ref.result["device_count"])
    if not ref.result["peer"]:
        raise gt.Skip("GPUs 0 and 1 have no peer access")
    got = limited_run(1.5, "peer,host", peer=True)
    gt.expect(got.stats["migrations_d2d"] > 0, "nothing moved to the peer GPU")


def case_async():
    got = limited_run(1.5, "host", extra={"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
    calls = got.stats.get("driver_calls", {})
    gt.expect(int(calls.get("cuMemAllocAsync", 0)) + int(calls.get("cuMemAllocAsync_ptsz", 0)) > 0,
              "PyTorch's cudaMallocAsync backend made no stream-ordered allocation")


def case_expandable():
    ref = native()
    alloc_conf = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    # Fits (the limit 1.25x the job): runs, NVML within the limit.
    roomy = int(ref.result["max_allocated"] * 1.25) // (2 * MiB) * (2 * MiB)
    env = dict(alloc_conf, GVM_DEVICE_LIMIT="0:%d" % roomy)
    over = overhead(env)
    got = gt.run_child(__file__, "train", {}, shim=True, env=env, label="train, expandable segments, fits")
    gt.compare_series(ref.result["losses"], got.result["losses"], 0.0, "losses")
    peak = got.result["nvml_peak"][0]
    print("  fits: limit %.2f GiB, NVML peak %.2f GiB (overhead %.0f MiB), held_peak %s"
          % (roomy / GiB, peak / GiB, over[0] / MiB, got.stats.get("held_peak")))
    gt.expect(peak <= roomy + over[0], "NVML peak %.0f MiB past the limit %.0f MiB + overhead %.0f MiB"
              % (peak / MiB, roomy / MiB, over[0] / MiB))
    gt.expect(int(got.stats["held_peak"]["0"]) >= ref.result["max_allocated"] // 2,
              "PyTorch's own memory was not counted (held_peak %s)" % got.stats["held_peak"]["0"])
    # Does not fit (1.5x the limit), spill on: PyTorch's memory cannot
    # move, so the job fails as on a smaller GPU, and never passes it.
    tight = limit_for(1.5)
    env = dict(alloc_conf, GVM_DEVICE_LIMIT="0:%d" % tight, GVM_SPILL="host")
    over = overhead(env)
    got = gt.run_child(__file__, "train", {"catch_oom": True}, shim=True, env=env,
                       label="train, expandable segments, 1.5x the limit")
    peak = got.result["nvml_peak"][0]
    print("  over: limit %.2f GiB, out of memory %s, NVML peak %.2f GiB (overhead %.0f MiB)"
          % (tight / GiB, got.result["oom"], peak / GiB, over[0] / MiB))
    gt.expect(got.result["oom"], "a job 1.5x the limit ran with its memory outside gvmshim's reach")
    gt.expect(peak <= tight + over[0], "NVML peak %.0f MiB past the limit %.0f MiB + overhead %.0f MiB"
              % (peak / MiB, tight / MiB, over[0] / MiB))


def main():
    return gt.suite_main("torch-limit", "torch", HANDLERS,
                         [("limit_host_1_25x", case_host(1.25)), ("limit_host_1_5x", case_host(1.5)),
                          ("limit_host_2x", case_host(2.0)), ("limit_host_lazy_1_5x", case_host_lazy),
                          ("limit_peer_1_5x", case_peer),
                          ("limit_async_1_5x", case_async), ("limit_expandable", case_expandable)])


if __name__ == "__main__":
    sys.exit(main())
