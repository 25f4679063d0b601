#!/usr/bin/env python3
"""Distributed training with NCCL under gvmshim, compared with the native
run of the same script: one process per GPU (torch.multiprocessing, spawn),
two ranks where there are two GPUs.

Cases:
  ddp_register_hook_cumem_on   DDP with PyTorch's allocator hook
                               (TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1:
                               every allocator segment is registered with
                               NCCL), NCCL_CUMEM_ENABLE=1: losses equal
                               native, every rank exits 0, no "NCCL WARN"
                               (NCCL_DEBUG=WARN) that the native run does
                               not print too
  ddp_register_hook_cumem_off  the same with NCCL_CUMEM_ENABLE=0 (as RL
                               stacks run it: NCCL's own transport buffers
                               are then cudaMalloc memory, gvmshim's, shared
                               between ranks through CUDA IPC)
  ddp_legacy_register          the hook with NCCL_LEGACY_CUDA_REGISTER=1:
                               registration goes through CUDA IPC on
                               gvmshim memory
  fsdp2_same_losses            FSDP2 (fully_shard) training: losses equal
                               native; the step time ratio is printed
  fsdp2_spilled                FSDP2 under a device limit with spill to
                               host: losses equal native, memory moved
  collectives_on_moved_memory  all_reduce and all_gather on tensors gvmshim
                               moved to host (mapped) or to the peer GPU
                               give the exact expected values

Exit 77 without torch, NCCL or a GPU.
"""
import json
import os
import re
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402

WIDTH = 2048
STEPS = 6


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the workers ---------------------------------------------------------------


def make_model(torch, dev):
    import torch.nn as nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                         nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 10)).to(dev)


def train(torch, model, params, rank, steps):
    import torch.nn.functional as F

    dev = torch.device("cuda", rank)
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(64, WIDTH, generator=g).to(dev)
    y = torch.randint(0, 10, (64,), generator=g).to(dev)
    opt = torch.optim.Adam(params, lr=1e-3)
    losses, times = [], []
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()).hex())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return losses, times


def run_ddp(torch, rank, args):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = make_model(torch, torch.device("cuda", rank))
    ddp = DDP(model, device_ids=[rank], bucket_cap_mb=8)
    losses, times = train(torch, ddp, ddp.parameters(), rank, args.get("steps", STEPS))
    return {"losses": losses, "times": times}


def run_fsdp(torch, rank, args):
    args = dict(args, steps=args.get("steps", 20))
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    model = make_model(torch, torch.device("cuda", rank))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    losses, times = train(torch, model, model.parameters(), rank, args.get("steps", STEPS))
    return {"losses": losses, "times": times}


def moved(torch, dist, rank, world, where):
    """A tensor filled with rank-specific values, moved by gvmshim (or not),
    then all-reduced and all-gathered; the values are exact in float32."""
    import gvmshim

    dev = torch.device("cuda", rank)
    n = 8 << 20   # 32 MiB of float32
    x = torch.arange(n, device=dev, dtype=torch.float32).remainder_(1024).add_(rank + 1)
    gathered = torch.empty(world * n, device=dev, dtype=torch.float32)
    torch.cuda.synchronize()
    if where == "host":
        gvmshim.migrate(x.data_ptr(), gvmshim.HOST)
        gvmshim.migrate(gathered.data_ptr(), gvmshim.HOST)
    elif where == "peer" and torch.cuda.device_count() > 1:
        peer = (rank + 1) % torch.cuda.device_count()
        gvmshim.migrate(x.data_ptr(), peer)
        gvmshim.migrate(gathered.data_ptr(), peer)
    loc = gvmshim.query(x.data_ptr()).location
    dist.all_reduce(x)
    dist.all_gather_into_tensor(gathered, x)
    torch.cuda.synchronize()
    base = torch.arange(n, device=dev, dtype=torch.float32).remainder_(1024)
    total = sum(r + 1 for r in range(world))
    ok_reduce = bool(torch.equal(x, base * world + total))
    ok_gather = all(bool(torch.equal(gathered[r * n:(r + 1) * n], x)) for r in range(world))
    return {"where": where, "location": loc, "reduce_ok": ok_reduce, "gather_ok": ok_gather}


def run_moved(torch, rank, args):
    import torch.distributed as dist

    world = dist.get_world_size()
    return {"moved": [moved(torch, dist, rank, world, w) for w in ("device", "host", "peer")]}


RUNS = {"ddp": run_ddp, "fsdp": run_fsdp, "moved": run_moved}


def worker(rank, world, port, args, outdir):
    out = {"rank": rank}
    try:
        import torch
        import torch.distributed as dist

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world,
                                device_id=torch.device("cuda", rank))
        out.update(RUNS[args["run"]](torch, rank, args))
        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:   # the launcher reports it
        import traceback

        out["error"] = "%s\n%s" % (e, traceback.format_exc()[-1500:])
    with open(os.path.join(outdir, "rank%d.json" % rank), "w") as f:
        json.dump(out, f)


def child_job(args):
    torch = gt.torch_or_skip()
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_nccl_available():
        gt.child_skip("torch has no NCCL backend")
    world = min(2, torch.cuda.device_count())
    port = free_port()
    outdir = tempfile.mkdtemp(prefix="gvm-nccl-")
    ctx = mp.get_context("spawn")
    stats = os.environ.get("GVM_STATS")
    procs = []
    for rank in range(world):
        if stats:
            os.environ["GVM_STATS"] = "%s.rank%d" % (stats, rank)
        p = ctx.Process(target=worker, args=(rank, world, port, args, outdir))
        p.start()
        procs.append(p)
    if stats:
        os.environ["GVM_STATS"] = stats
    for p in procs:
        p.join(240)
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


def job(name, run, shim, env=None):
    e = dict(env or {})
    e.setdefault("NCCL_DEBUG", "WARN")
    r = gt.once(name, lambda: gt.run_child(__file__, "job", {"run": run}, shim=shim, env=e, timeout=400,
                                           label="%s (%s)" % (name, "shim" if shim else "native")))
    for rk in r.result["ranks"]:
        gt.expect(not rk.get("error") and rk["exit"] == 0,
                  "%s: rank %d failed (exit %s): %s" % (name, rk["rank"], rk["exit"], rk.get("error")))
    return r


def warnings(r):
    """NCCL's WARN lines, without time, host, pids, ranks and addresses."""
    out = set()
    for ln in r.output.splitlines():
        if "NCCL WARN" not in ln:
            continue
        text = ln.split("NCCL WARN", 1)[1]
        out.add(re.sub(r"0x[0-9a-f]+|\b\d+\b", "N", text).strip())
    return out


def no_new_warnings(native, shim, what):
    """The shim's run warns of nothing the native run does not (natively,
    NCCL 2.28 warns at exit that it cannot deregister legacy-registered
    buffers once the peers' sockets are closed)."""
    extra = warnings(shim) - warnings(native)
    gt.expect(not extra, "%s: NCCL warned under the shim only:\n%s" % (what, "\n".join(sorted(extra)[:8])))
    if warnings(native):
        print("  NCCL warnings of the native run too: %s" % "; ".join(sorted(warnings(native))[:4]))


def same_losses(a, b, what):
    for x, y in zip(a.result["ranks"], b.result["ranks"]):
        worst = gt.compare_series(x["losses"], y["losses"], 0.0, "%s: rank %d losses" % (what, x["rank"]))
        print("  rank %d: %d losses %s" % (x["rank"], len(x["losses"]), "bitwise equal" if worst == 0 else
                                           "worst relative difference %.3g" % worst))


def median_step(r):
    import statistics

    return statistics.median(t for rk in r.result["ranks"] for t in rk["times"][2:])


def hook_case(label, env):
    def case():
        e = dict(env, TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK="1")
        native = job("native-" + label, "ddp", False, e)
        shim = job("shim-" + label, "ddp", True, e)
        print("  %s, %d rank(s); %s" % (native.result["device"], native.result["world"],
                                      " ".join("%s=%s" % kv for kv in sorted(e.items()))))
        same_losses(native, shim, label)
        no_new_warnings(native, shim, label)
        print("  median step: native %.2f ms, shim %.2f ms (%.3fx)"
              % (median_step(native) * 1e3, median_step(shim) * 1e3, median_step(shim) / median_step(native)))
    return case


def case_fsdp_same():
    native = job("native-fsdp", "fsdp", False)
    shim = job("shim-fsdp", "fsdp", True)
    same_losses(native, shim, "fsdp2")
    no_new_warnings(native, shim, "fsdp2")
    print("  median step: native %.2f ms, shim %.2f ms (%.3fx)"
          % (median_step(native) * 1e3, median_step(shim) * 1e3, median_step(shim) / median_step(native)))


def case_fsdp_spilled():
    native = job("native-fsdp", "fsdp", False)
    # Each rank's limit: what NCCL created itself (counted, immovable) plus
    # 64 MiB for the model's share, far less than the step needs.
    shim = job("shim-fsdp", "fsdp", True)
    limits = []
    for rk in shim.result["ranks"]:
        own = int(gt.stat(rk.get("stats") or {}, "program_vmm_peak.%d" % rk["rank"]) or 0)
        limits.append("%d:%d" % (rk["rank"], own + 64 * gt.MiB))
    spill = job("spill-fsdp", "fsdp", True, {"GVM_DEVICE_LIMIT": ",".join(limits), "GVM_SPILL": "host"})
    same_losses(native, spill, "fsdp2 spilled")
    no_new_warnings(native, spill, "fsdp2 spilled")
    for rk in spill.result["ranks"]:
        moved = gt.stat(rk.get("stats") or {}, "migrations_d2h")
        print("  rank %d: %s moves to host under %s" % (rk["rank"], moved, ",".join(limits)))
        gt.expect(moved and moved > 0, "rank %d never spilled" % rk["rank"])


def case_moved():
    shim = job("shim-moved", "moved", True)
    gt.expect(not warnings(shim), "NCCL warned: %s" % sorted(warnings(shim))[:4])
    for rk in shim.result["ranks"]:
        for m in rk["moved"]:
            print("  rank %d: tensor at location %d (%s): all_reduce %s, all_gather %s"
                  % (rk["rank"], m["location"], m["where"], "exact" if m["reduce_ok"] else "WRONG",
                     "exact" if m["gather_ok"] else "WRONG"))
            gt.expect(m["reduce_ok"] and m["gather_ok"],
                      "rank %d: a collective on memory at %s gave wrong values" % (rk["rank"], m["where"]))
        host = [m for m in rk["moved"] if m["where"] == "host"][0]
        gt.expect(host["location"] == -1, "rank %d: the tensor did not move to host (location %d)"
                  % (rk["rank"], host["location"]))


def main():
    return gt.suite_main("torch-nccl", "torch", {"job": child_job},
                         [("ddp_register_hook_cumem_on", hook_case("cumem-on", {"NCCL_CUMEM_ENABLE": "1"})),
                          ("ddp_register_hook_cumem_off", hook_case("cumem-off", {"NCCL_CUMEM_ENABLE": "0"})),
                          ("ddp_legacy_register", hook_case("legacy", {"NCCL_LEGACY_CUDA_REGISTER": "1"})),
                          ("fsdp2_same_losses", case_fsdp_same),
                          ("fsdp2_spilled", case_fsdp_spilled),
                          ("collectives_on_moved_memory", case_moved)])


if __name__ == "__main__":
    sys.exit(main())
