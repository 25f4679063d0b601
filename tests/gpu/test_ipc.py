#!/usr/bin/env python3
"""CUDA IPC from Python under gvmshim: a CUDA tensor passed to another
process with torch.multiprocessing (the child modifies it, the parent sees
it), and CuPy's cupy.cuda.runtime.ipcGetMemHandle / ipcOpenMemHandle
between two processes. Each job runs natively and under the shim, and both
must give the same answer.

The parent runs without the shim; each job is a child process whose own
worker processes (multiprocessing, spawn) inherit LD_PRELOAD. Exit 77
without torch and cupy, or without a GPU.
"""
import importlib.util
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402


# ---- workers (run in processes the jobs spawn) ----------------------------------


def torch_worker(t, q):
    t.mul_(2).add_(1)   # in place: the parent's memory
    import torch
    torch.cuda.synchronize()
    q.put(float(t[12345].item()))


def cupy_worker(handle, nbytes, q):
    import cupy as cp
    ptr = cp.cuda.runtime.ipcOpenMemHandle(handle)
    mem = cp.cuda.UnownedMemory(ptr, nbytes, None)
    a = cp.ndarray((nbytes // 4,), dtype=cp.float32, memptr=cp.cuda.MemoryPointer(mem, 0))
    first = float(a[7])
    a *= 3
    cp.cuda.runtime.deviceSynchronize()
    cp.cuda.runtime.ipcCloseMemHandle(ptr)
    q.put(first)


# ---- jobs ----------------------------------------------------------------------


def child_torch(args):
    torch = gt.torch_or_skip()
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    t = torch.arange(args["n"], dtype=torch.float32, device="cuda")
    q = ctx.Queue()
    p = ctx.Process(target=torch_worker, args=(t, q))
    p.start()
    seen = q.get(timeout=120)
    p.join(120)
    torch.cuda.synchronize()
    return {"exit": p.exitcode, "child_saw": seen,
            "parent_sees": [float(t[i].item()) for i in (0, 12345, args["n"] - 1)]}


def child_cupy(args):
    try:
        import cupy as cp
    except ImportError:
        gt.child_skip("no cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            gt.child_skip("no GPU (0 devices)")
    except Exception as e:
        gt.child_skip("no GPU (%s)" % e)
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    # Without CuPy's pool every array is an allocation of its own, so the
    # handle's base is the array's first element, natively as under the shim.
    cp.cuda.set_allocator(None)
    results = {}
    for n in (args["n"], 200):   # a large allocation, and one packed in a chunk
        a = cp.arange(n, dtype=cp.float32) + 1
        cp.cuda.runtime.deviceSynchronize()
        h = cp.cuda.runtime.ipcGetMemHandle(a.data.ptr)
        q = ctx.Queue()
        p = ctx.Process(target=cupy_worker, args=(h, n * 4, q))
        p.start()
        first = q.get(timeout=120)
        p.join(120)
        results[str(n)] = {"exit": p.exitcode, "child_saw": first, "parent_sees": float(a[7]), "sum": float(a.sum())}
    return results


# ---- the parent ----------------------------------------------------------------


def both(job, args):
    native = gt.run_child(__file__, job, args)
    shim = gt.run_child(__file__, job, dict(args, shim=True), shim=True)
    return native, shim


def torch_tensor_shared_with_child():
    n = 4 << 20
    native, shim = both("torch", {"n": n})
    for r in (native, shim):
        gt.expect(r.result["exit"] == 0, "the worker exited %s" % r.result["exit"])
        gt.expect(r.result["parent_sees"] == [1.0, 12345 * 2 + 1.0, (n - 1) * 2 + 1.0],
                  "the parent sees %s" % r.result["parent_sees"])
    gt.expect(shim.result["parent_sees"] == native.result["parent_sees"], "native and shim differ")
    gt.expect(gt.stat(shim.stats, "ipc_exports") >= 1, "the shim exported nothing: %s" % gt.stat(shim.stats, "ipc_exports"))


def cupy_ipc_handles():
    n = 1 << 22
    native, shim = both("cupy", {"n": n})
    for r in (native, shim):
        for size, v in r.result.items():
            gt.expect(v["exit"] == 0, "%s: the worker exited %s" % (size, v["exit"]))
            gt.expect(v["child_saw"] == 8.0 and v["parent_sees"] == 24.0, "%s: %s" % (size, v))
    gt.expect(shim.result == native.result, "native %s, shim %s" % (native.result, shim.result))
    gt.expect(gt.stat(shim.stats, "ipc_exports") >= 2, "the shim exported %s" % gt.stat(shim.stats, "ipc_exports"))


def main():
    if gt.child_main({"torch": child_torch, "cupy": child_cupy}):
        return 0
    have = [m for m in ("torch", "cupy") if importlib.util.find_spec(m) is not None]
    if not have:
        gt.skip_whole_test("no torch and no cupy")
    r = gt.Runner("ipc")
    if "torch" in have:
        r.run("torch_tensor_shared_with_child", torch_tensor_shared_with_child)
    if "cupy" in have:
        r.run("cupy_ipc_handles", cupy_ipc_handles)
    return r.finish()


if __name__ == "__main__":
    sys.exit(main())
