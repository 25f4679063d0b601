#!/usr/bin/env python3
"""All-reduce bus bandwidth with NCCL, one process per GPU (two where there
are two), as nccl-tests reports it: busbw = bytes / time x 2(n-1)/n (with
one rank, the algorithm bandwidth bytes / time). Rows: 64 MiB and 1 GiB of
float32, each with the tensor-register allocator hook off and on
(TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK, which registers every
allocator segment with NCCL). scripts/bench nccl runs it natively and under
the shim and prints the ratio; it prints one BENCH_JSON line.

    python3 bench/nccl.py [--iters N] [--sizes 64M,1G]
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

MiB, GiB = 1 << 20, 1 << 30


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": MiB, "G": GiB}.get(s[-1], 1)
    return int(s[:-1] if s[-1] in "KMG" else s) * mult


def worker(rank, world, port, sizes, iters, outdir):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    rows = []
    for size in sizes:
        x = torch.ones(size // 4, device="cuda", dtype=torch.float32)
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        secs = (time.perf_counter() - t0) / iters
        x.fill_(1.0)
        dist.all_reduce(x)
        ok = bool(torch.all(x == world).item())
        factor = 2.0 * (world - 1) / world if world > 1 else 1.0
        rows.append({"bytes": size, "seconds": secs, "busbw_gbps": size / secs * factor / 1e9, "ok": ok})
        del x
        torch.cuda.empty_cache()
    dist.destroy_process_group()
    with open(os.path.join(outdir, "rank%d.json" % rank), "w") as f:
        json.dump(rows, f)


def one_config(sizes, iters, register):
    """Runs the ranks in a child python (so the hook's variable is read at
    start) and returns rank 0's rows."""
    env = dict(os.environ)
    env["TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"] = "1" if register else "0"
    outdir = tempfile.mkdtemp(prefix="gvm-bench-nccl-")
    cmd = [sys.executable, os.path.abspath(__file__), "--ranks", outdir, "--iters", str(iters),
           "--sizes", ",".join(str(s) for s in sizes)]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=500)
    out = p.stdout.decode("utf-8", "replace")
    rows = None
    path = os.path.join(outdir, "rank0.json")
    if os.path.exists(path):
        with open(path) as f:
            rows = json.load(f)
    for name in os.listdir(outdir):
        os.unlink(os.path.join(outdir, name))
    os.rmdir(outdir)
    if p.returncode != 0 or rows is None:
        sys.stdout.write(out[-3000:])
        raise SystemExit(1)
    warned = [ln for ln in out.splitlines() if "NCCL WARN" in ln]
    for r in rows:
        r["registered"] = register
        r["nccl_warnings"] = len(warned)
    return rows


def run_ranks(outdir, sizes, iters):
    import torch
    import torch.multiprocessing as mp

    world = min(2, torch.cuda.device_count())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(r, world, port, sizes, iters, outdir)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(400)
    with open(os.path.join(outdir, "world.json"), "w") as f:
        json.dump({"world": world}, f)
    return 0 if all(p.exitcode == 0 for p in procs) else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--sizes", default="64M,1G")
    ap.add_argument("--ranks", help=argparse.SUPPRESS)
    a = ap.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",") if s]
    if a.ranks:
        return run_ranks(a.ranks, sizes, a.iters)
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        print("SKIP no torch")
        return 77
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        print("SKIP no GPU or no NCCL")
        return 77
    world = min(2, torch.cuda.device_count())
    rows = []
    for register in (False, True):
        rows += one_config(sizes, a.iters, register)
    print("BENCH_JSON " + json.dumps({"world": world, "rows": rows, "iters": a.iters,
                                      "device": torch.cuda.get_device_name(0)}))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
