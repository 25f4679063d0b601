#!/usr/bin/env python3
"""DistributedDataParallel under gvmshim, the way people run it: one
process per GPU (torch.multiprocessing, spawn), the NCCL backend, gradients
all-reduced in buckets that live in gvmshim's memory. With one GPU the job
has one rank (NCCL still runs its kernels on the buckets); with two, two.

Cases:
  same_losses_native_vs_shim  every rank's losses equal the native run's
  ranks_agree                 after training, every rank holds the same
                              parameters (DDP's promise), natively and under
                              the shim
  buckets_are_gvmshim_memory  a gradient and a parameter of each rank are
                              gvmshim allocations (gvm_query knows them)
  spilled_to_host             under GVM_SPILL=host and a device limit that
                              leaves the model 256M beside NCCL's own
                              buffers (NCCL creates those with cuMemCreate:
                              they count under the limit and cannot move;
                              their peak is read from the unlimited run) the
                              model (~600 MiB of weights, gradients and
                              buckets per rank) spills, NCCL reduces
                              spilled buckets, and the losses still equal
                              the native ones

The parent never imports torch; each job is a child process whose workers
inherit LD_PRELOAD. Exit 77 without torch, NCCL or a GPU.
"""
import json
import os
import socket
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402

WIDTH = 4096
STEPS = 6


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the workers (one per rank) ------------------------------------------------


def ddp_worker(rank, world, port, args, outdir):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    out = {"rank": rank}
    try:
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                              nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 10)).to(dev)
        ddp = DDP(model, device_ids=[rank], bucket_cap_mb=25)
        g = torch.Generator().manual_seed(100 + rank)
        x = torch.randn(64, WIDTH, generator=g).to(dev)
        y = torch.randint(0, 10, (64,), generator=g).to(dev)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        losses = []
        for _ in range(args.get("steps", STEPS)):
            opt.zero_grad(set_to_none=False)
            loss = F.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
            losses.append(float(loss.item()).hex())
        torch.cuda.synchronize()
        out["losses"] = losses
        out["checksum"] = float(sum(p.detach().double().sum().item() for p in model.parameters())).hex()
        if args.get("shim"):
            import gvmshim

            w = model[2].weight
            out["query_weight"] = gt.gvm_info_dict(gvmshim.query(w.data_ptr()))
            out["query_grad"] = gt.gvm_info_dict(gvmshim.query(w.grad.data_ptr()))
        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:   # the launcher reports it
        import traceback

        out["error"] = "%s\n%s" % (e, traceback.format_exc()[-1500:])
    with open(os.path.join(outdir, "rank%d.json" % rank), "w") as f:
        json.dump(out, f)


# ---- the launcher (a child of the test) ---------------------------------------


def child_ddp(args):
    torch = gt.torch_or_skip()
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_nccl_available():
        gt.child_skip("torch has no NCCL backend")
    world = min(2, torch.cuda.device_count())
    port = free_port()
    outdir = tempfile.mkdtemp(prefix="gvm-ddp-")
    ctx = mp.get_context("spawn")
    stats = os.environ.get("GVM_STATS")
    procs = []
    for rank in range(world):
        # Each rank's shim writes its own stats (the workers inherit the
        # environment as it is when they start).
        if stats:
            os.environ["GVM_STATS"] = "%s.rank%d" % (stats, rank)
        p = ctx.Process(target=ddp_worker, args=(rank, world, port, args, outdir))
        p.start()
        procs.append(p)
    if stats:
        os.environ["GVM_STATS"] = stats
    for p in procs:
        p.join(200)
    ranks = []
    for rank, p in enumerate(procs):
        path = os.path.join(outdir, "rank%d.json" % rank)
        r = {"rank": rank, "error": "no result (exit %s)" % p.exitcode}
        if os.path.exists(path):
            with open(path) as f:
                r = json.load(f)
            os.unlink(path)
        r["exit"] = p.exitcode
        if stats and os.path.exists("%s.rank%d" % (stats, rank)):
            with open("%s.rank%d" % (stats, rank)) as f:
                r["stats"] = json.load(f)
            os.unlink("%s.rank%d" % (stats, rank))
        ranks.append(r)
    os.rmdir(outdir)
    return {"world": world, "device": torch.cuda.get_device_name(0), "ranks": ranks}


# ---- the parent ----------------------------------------------------------------

MODEL_SHARE = 256 * gt.MiB


def spill_env():
    """The limit: NCCL's own peak on each device (from the unlimited run)
    plus 256 MiB for the model, far less than it needs."""
    limits = []
    for rk in job("shim").result["ranks"]:
        own = int((rk.get("stats") or {}).get("program_vmm_peak", {}).get(str(rk["rank"]), 0) or 0)
        limits.append("%d:%d" % (rk["rank"], own + MODEL_SHARE))
    return {"GVM_DEVICE_LIMIT": ",".join(limits), "GVM_SPILL": "host"}


def job(name):
    shim = name != "native"
    env = spill_env() if name == "spill" else None
    r = gt.once(name, lambda: gt.run_child(__file__, "ddp", {"shim": shim}, shim=shim, env=env, timeout=300,
                                           label="ddp (%s)" % name))
    for rk in r.result["ranks"]:
        gt.expect(not rk.get("error") and rk["exit"] == 0,
                  "%s: rank %d failed (exit %s): %s" % (name, rk["rank"], rk["exit"], rk.get("error")))
    return r


def case_same_losses():
    native, shim = job("native"), job("shim")
    print("  %s, %d rank(s)" % (native.result["device"], native.result["world"]))
    for a, b in zip(native.result["ranks"], shim.result["ranks"]):
        worst = gt.compare_series(a["losses"], b["losses"], 1e-6, "rank %d losses" % a["rank"])
        first, last = float.fromhex(a["losses"][0]), float.fromhex(a["losses"][-1])
        print("  rank %d: loss %.6f -> %.6f; worst relative difference %.3g%s"
              % (a["rank"], first, last, worst, " (bitwise equal)" if worst == 0 else ""))
        gt.expect(last < first, "rank %d: the loss did not go down (%.6f -> %.6f)" % (a["rank"], first, last))


def case_ranks_agree():
    for name in ("native", "shim"):
        sums = [rk["checksum"] for rk in job(name).result["ranks"]]
        gt.expect(len(set(sums)) == 1, "%s: the ranks' parameters differ after training: %s" % (name, sums))
        print("  %s: %d rank(s) hold parameters summing to %.9g" % (name, len(sums), float.fromhex(sums[0])))
    gt.expect(job("native").result["ranks"][0]["checksum"] == job("shim").result["ranks"][0]["checksum"],
              "the trained parameters differ between native and shim")


def case_buckets():
    for rk in job("shim").result["ranks"]:
        for what in ("query_weight", "query_grad"):
            q = rk[what]
            gt.expect(q["device"] == rk["rank"], "rank %d: %s is on device %s" % (rk["rank"], what, q["device"]))
        print("  rank %d: weight and gradient are gvmshim allocations of %d and %d bytes"
              % (rk["rank"], rk["query_weight"]["size"], rk["query_grad"]["size"]))


def case_spilled():
    native, spill = job("native"), job("spill")
    for a, b in zip(native.result["ranks"], spill.result["ranks"]):
        gt.compare_series(a["losses"], b["losses"], 1e-6, "rank %d losses under spill" % a["rank"])
        st = b.get("stats") or {}
        moved = gt.stat(st, "migrations_d2h") if st else 0
        print("  rank %d: losses equal native; %s moves to host" % (a["rank"], moved))
        gt.expect(st, "rank %d wrote no stats" % a["rank"])
        gt.expect(moved > 0, "rank %d never spilled under %s" % (a["rank"], spill_env()))
    gt.expect(spill.result["ranks"][0]["checksum"] == native.result["ranks"][0]["checksum"],
              "the trained parameters differ between native and spill")


def main():
    return gt.suite_main("torch-ddp", "torch", {"ddp": child_ddp},
                         [("same_losses_native_vs_shim", case_same_losses), ("ranks_agree", case_ranks_agree),
                          ("buckets_are_gvmshim_memory", case_buckets), ("spilled_to_host", case_spilled)])


if __name__ == "__main__":
    sys.exit(main())
