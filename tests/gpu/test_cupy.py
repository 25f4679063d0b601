#!/usr/bin/env python3
"""CuPy under gvmshim: deterministic matmuls, reductions and a small
gradient-descent loop give the same numbers natively and under the shim;
the stats show the shim served CuPy's pool; and a computation whose
arrays need ~1.5x GVM_DEVICE_LIMIT completes under GVM_SPILL=host with the
same results as natively. CuPy's stream-ordered pool (MemoryAsyncPool,
cudaMallocAsync) is held to the limit too: NVML's figure for the process
stays within the limit past what it held before the job, and the pool's
own used_bytes() counts the arrays; and free_all_blocks() (a trim of the
default pool) gives freed memory back at once, as NVML sees natively.

The parent runs without the shim (it never imports cupy); each run is a
child process. Exit 77 without cupy or a GPU.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402

MiB, GiB = gt.MiB, gt.GiB
LIMIT = "1G"
LIMIT_BYTES = GiB


def cupy_or_skip():
    try:
        import cupy as cp
    except ImportError:
        gt.child_skip("no cupy")
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError without a driver
        gt.child_skip("no GPU (%s)" % e)
    if n < 1:
        gt.child_skip("no GPU (0 devices)")
    return cp


def compute(cp):
    rs = cp.random.RandomState(seed=0)
    a = rs.standard_normal((1024, 1024), dtype=cp.float32)
    b = rs.standard_normal((1024, 1024), dtype=cp.float32)
    c = a @ b
    vals = [float(c.sum()), float(cp.linalg.norm(c)), float(c.max()), float((a * b).mean()),
            float(cp.abs(c).min())]
    x = rs.standard_normal((4096, 64), dtype=cp.float32)
    w_true = rs.standard_normal((64,), dtype=cp.float32)
    y = x @ w_true
    w = cp.zeros(64, dtype=cp.float32)
    losses = []
    for _ in range(30):
        r = x @ w - y
        losses.append(float((r * r).mean()))
        w -= 0.1 * (x.T @ r) * (2.0 / x.shape[0])
    cp.cuda.Device(0).synchronize()
    return {"vals": [v.hex() for v in vals], "losses": [v.hex() for v in losses]}, a


def spill_work(cp, mats, dim, steps):
    rs = cp.random.RandomState(seed=1)
    ms = [rs.standard_normal((dim, dim), dtype=cp.float32) / dim ** 0.5 for _ in range(mats)]
    v = rs.standard_normal((dim,), dtype=cp.float32)
    sums = []
    for _ in range(steps):
        for m in ms:
            v = cp.tanh(m @ v)
        v = v / cp.linalg.norm(v)
        sums.append(float(v.sum()).hex())
    cp.cuda.Device(0).synchronize()
    return sums, ms


def nvml_or_skip():
    from gvmnvml import Sampler, try_nvml

    nvml, why = try_nvml(1)
    if nvml is None:
        gt.child_skip(why)
    return Sampler(nvml, 1)


def child_run(args):
    cp = cupy_or_skip()
    pool = sampler = None
    if args.get("async_pool"):
        pool = cp.cuda.MemoryAsyncPool()
        cp.cuda.set_allocator(pool.malloc)
    if args.get("nvml"):
        # The context, cuBLAS and the pool's first block, before the baseline.
        x = cp.ones((64, 64), dtype=cp.float32)
        float((x @ x).sum())
        cp.cuda.Device(0).synchronize()
        sampler = nvml_or_skip()
        sampler.sample()
        base = sampler.peak[0]
        sampler.start()
    name = cp.cuda.runtime.getDeviceProperties(0)["name"]
    res = {"device": name.decode(errors="replace") if isinstance(name, bytes) else str(name)}
    if args.get("need_free"):
        free, _ = cp.cuda.runtime.memGetInfo()
        if free < args["need_free"]:
            gt.child_skip("not enough GPU memory: %d MiB free" % (free // MiB))
    if args.get("compute"):
        out, a = compute(cp)
        res.update(out)
        if args.get("shim"):
            import gvmshim

            res["query"] = gt.gvm_info_dict(gvmshim.query(a.data.ptr))
            res["a_ptr"] = int(a.data.ptr)
    if args.get("spill"):
        sums, ms = spill_work(cp, args["mats"], args["dim"], args["steps"])
        res["spill_sums"] = sums
        res["spill_bytes"] = sum(int(m.nbytes) for m in ms)
        if args.get("shim"):
            import gvmshim

            by = {}
            for m in ms:
                loc = str(gvmshim.query(m.data.ptr).location)
                by[loc] = by.get(loc, 0) + int(m.nbytes)
            res["mats_at"] = by
    if pool is not None:
        res["pool_used"] = int(pool.used_bytes())
    if sampler is not None:
        sampler.stop()
        res["nvml_base"], res["nvml_peak"] = base, sampler.peak[0]
    return res


def child_trim(args):
    """2 GiB of arrays from MemoryAsyncPool, made and freed within a few
    milliseconds, then pool.free_all_blocks() (a trim of the device's
    default pool to nothing): NVML's figure for the process before, with
    the arrays, and right after the trim."""
    cp = cupy_or_skip()
    from gvmnvml import try_nvml

    pool = cp.cuda.MemoryAsyncPool()
    cp.cuda.set_allocator(pool.malloc)
    x = cp.ones((64, 64), dtype=cp.float32)
    float((x @ x).sum())
    cp.cuda.Device(0).synchronize()
    # NVML lists the process once it has a context.
    nvml, why = try_nvml(1)
    if nvml is None:
        gt.child_skip(why)
    base = nvml.used(0)
    arrays = [cp.full((64 * MiB,), i, dtype=cp.float32) for i in range(8)]
    sums = [float(a[-1]) for a in arrays]
    cp.cuda.Device(0).synchronize()
    held = nvml.used(0)
    del arrays
    cp.cuda.Device(0).synchronize()
    pool.free_all_blocks()
    after = nvml.used(0)
    return {"base": base, "held": held, "after": after, "sums": sums}


SPILL = {"mats": 6, "dim": 8192, "steps": 4}


def native():
    return gt.once("native", lambda: gt.run_child(
        __file__, "run", dict(SPILL, compute=True, spill=True, need_free=3 * GiB), shim=False))


def shim_compute():
    return gt.once("shim", lambda: gt.run_child(__file__, "run", {"compute": True, "shim": True}, shim=True))


def case_same_results():
    ref, got = native(), shim_compute()
    w1 = gt.compare_series(ref.result["vals"], got.result["vals"], 1e-6, "matmul/reduction values")
    w2 = gt.compare_series(ref.result["losses"], got.result["losses"], 1e-6, "gradient-descent losses")
    l0, l1 = float.fromhex(ref.result["losses"][0]), float.fromhex(ref.result["losses"][-1])
    print("  device %s; loss %.5g -> %.5g; worst relative differences %.3g, %.3g"
          % (ref.result["device"], l0, l1, w1, w2))
    gt.expect(l1 < l0, "gradient descent did not reduce the loss")


def case_served_by_shim():
    got = shim_compute()
    st, q = got.stats, got.result["query"]
    calls = st.get("driver_calls", {})
    print("  allocations_total %d, cuMemAlloc_v2 %d; array at %#x in an allocation at %#x of %d bytes"
          % (st["allocations_total"], calls.get("cuMemAlloc_v2", 0), got.result["a_ptr"], q["base"], q["size"]))
    gt.expect(st["allocations_total"] > 0, "no allocation was served")
    gt.expect(st["alloc_failures"] == 0, "%d allocations failed" % st["alloc_failures"])
    gt.expect(q["location"] == 0 and q["device"] == 0, "array location %d device %d" % (q["location"], q["device"]))
    gt.expect(q["base"] <= got.result["a_ptr"] < q["base"] + q["size"], "gvm_query's allocation misses the array")


def case_spill_host():
    ref = native()
    need = ref.result["spill_bytes"]
    gt.expect(need >= 1.4 * LIMIT_BYTES, "the spill job holds only %.2f GiB" % (need / GiB))
    got = gt.run_child(__file__, "run", dict(SPILL, spill=True, shim=True), shim=True,
                       env={"GVM_DEVICE_LIMIT": LIMIT, "GVM_SPILL": "host"})
    worst = gt.compare_series(ref.result["spill_sums"], got.result["spill_sums"], 1e-6, "results")
    st = got.stats
    print("  %.2f GiB of matrices under a %s limit: spills %d (%.2f GiB), promotions %d; matrices at %s; "
          "worst relative difference %.3g" % (need / GiB, LIMIT, st["spills"], st["spilled_bytes"] / GiB,
                                              st["promotions"], got.result["mats_at"], worst))
    gt.expect(st["spills"] > 0, "nothing spilled")
    gt.expect(st["migrations_failed"] == 0 and st["alloc_failures"] == 0,
              "failed migrations %d, failed allocations %d" % (st["migrations_failed"], st["alloc_failures"]))


def case_async_pool_limit():
    ref = native()
    need = ref.result["spill_bytes"]
    got = gt.run_child(__file__, "run", dict(SPILL, spill=True, shim=True, async_pool=True, nvml=True), shim=True,
                       env={"GVM_DEVICE_LIMIT": LIMIT, "GVM_SPILL": "host"}, label="async pool (shim)")
    worst = gt.compare_series(ref.result["spill_sums"], got.result["spill_sums"], 1e-6, "results")
    r, st = got.result, got.stats
    grew = r["nvml_peak"] - r["nvml_base"]
    print("  %.2f GiB of matrices from MemoryAsyncPool under a %s limit: NVML %.0f -> peak %.0f MiB (+%.0f MiB), "
          "pool used_bytes %.2f GiB, spills %d; worst relative difference %.3g"
          % (need / GiB, LIMIT, r["nvml_base"] / MiB, r["nvml_peak"] / MiB, grew / MiB, r["pool_used"] / GiB,
             st["spills"], worst))
    # One 2 MiB piece of slack: NVML counts what the driver holds, the limit
    # what gvmshim handed out, and both round to the piece.
    gt.expect(grew <= LIMIT_BYTES + 2 * MiB, "NVML grew %.0f MiB, past the %s limit" % (grew / MiB, LIMIT))
    gt.expect(r["pool_used"] >= need, "the pool's used_bytes() %d is below its arrays' %d bytes"
              % (r["pool_used"], need))
    gt.expect(st["spills"] > 0, "nothing spilled")
    gt.expect(st["migrations_failed"] == 0 and st["alloc_failures"] == 0,
              "failed migrations %d, failed allocations %d" % (st["migrations_failed"], st["alloc_failures"]))


def case_async_pool_trim():
    """free_all_blocks() gives the pool's freed memory back: NVML shows it
    gone at once natively, and must under the shim, whose cache would
    otherwise keep memory freed this young for up to cache_idle."""
    for shim in (False, True):
        r = gt.run_child(__file__, "trim", {}, shim=shim, label="trim (%s)" % ("shim" if shim else "native")).result
        print("  %s: NVML %.0f MiB, with 2 GiB of arrays %.0f, after free_all_blocks() %.0f"
              % ("shim" if shim else "native", r["base"] / MiB, r["held"] / MiB, r["after"] / MiB))
        gt.expect(r["sums"] == [float(i) for i in range(8)], "the arrays held %s" % r["sums"])
        gt.expect(r["held"] - r["base"] >= 2 * GiB - 64 * MiB, "the arrays added only %.0f MiB"
                  % ((r["held"] - r["base"]) / MiB))
        gt.expect(r["after"] - r["base"] <= 64 * MiB, "%s: %.0f MiB still held after free_all_blocks()"
                  % ("shim" if shim else "native", (r["after"] - r["base"]) / MiB))


def main():
    return gt.suite_main("cupy", "cupy", {"run": child_run, "trim": child_trim},
                         [("same_results_native_vs_shim", case_same_results), ("served_by_shim", case_served_by_shim),
                          ("spill_host", case_spill_host), ("async_pool_limit", case_async_pool_limit),
                          ("async_pool_trim", case_async_pool_trim)])


if __name__ == "__main__":
    sys.exit(main())
