#!/usr/bin/env python3
"""CuPy's MemoryAsyncPool (cudaMallocAsync on the device's default pool)
natively and under the shim: the pool's figures, which CuPy reads with
cudaMemPoolGetAttribute (total_bytes() is RESERVED_MEM_CURRENT,
used_bytes() USED_MEM_CURRENT, free_bytes() their difference), must be the
same at every step of the sequences of CuPy's own TestMemoryAsyncPool
cases, and of a few more (odd sizes, the release threshold, the highs and
their reset, a trim that keeps some).

  figures_native_vs_shim          every figure at every step, equal
  cupy_assertions                 CuPy's assertions on those figures hold
                                  in both runs (total fixed without a
                                  synchronize, free = total - used, ...)
  free_all_blocks_large_chunk     70 % of the device from the async pool,
                                  freed without a synchronize, then 30 %
                                  from CuPy's default pool: natively
                                  out of memory (the pool keeps freed
                                  memory until a synchronize); under the
                                  shim served (README, stream-ordered
                                  pools: the difference is deliberate);
                                  the pool's figures equal in both; after
                                  free_all_blocks() both serve it
  interaction_with_default_pool   70 % held by CuPy's default pool, then
                                  30 % from the async pool: out of memory
                                  in both, served in both once the default
                                  pool frees its blocks

The parent runs without the shim (it never imports cupy); each run is a
child process. Exit 77 without cupy or a GPU.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402

MiB = gt.MiB

# cudaMemPoolAttr values (the driver's CUmemPool_attribute).
REUSE_OPPORTUNISTIC, RELEASE_THRESHOLD = 2, 4
RESERVED, RESERVED_HIGH, USED, USED_HIGH = 5, 6, 7, 8


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
    if not cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrMemoryPoolsSupported, 0):
        gt.child_skip("no GPU with memory pools")
    return cp


class Steps:
    """Records the pool's figures after each step, by name."""

    def __init__(self, cp, pool):
        self.cp, self.pool, self.rows = cp, pool, []
        self.handle = pool._pools[cp.cuda.Device().id]

    def attr(self, a):
        return int(self.cp.cuda.runtime.memPoolGetAttribute(self.handle, a))

    def set_attr(self, a, v):
        self.cp.cuda.runtime.memPoolSetAttribute(self.handle, a, v)

    def __call__(self, name):
        p = self.pool
        row = {"step": name, "total": int(p.total_bytes()), "used": int(p.used_bytes()),
               "free": int(p.free_bytes()), "used_high": self.attr(USED_HIGH),
               "reserved_high": self.attr(RESERVED_HIGH)}
        self.rows.append(row)
        return row


def child_figures(args):
    """CuPy's TestMemoryAsyncPool sequences, each from a clean pool (its
    setUp and tearDown: free_all_blocks()), and more."""
    cp = cupy_or_skip()
    from cupy.cuda import memory

    pool = memory.MemoryAsyncPool()
    unit = memory._allocation_unit_size
    s = Steps(cp, pool)
    stream = cp.cuda.Stream()

    def clean(name):
        pool.free_all_blocks()
        s.set_attr(USED_HIGH, 0)
        s.set_attr(RESERVED_HIGH, 0)
        s(name)

    clean("used_bytes2.start")
    p1 = pool.malloc(unit * 2)
    s("used_bytes2.p1")
    p2 = pool.malloc(unit * 4)
    s("used_bytes2.p2")
    del p2
    s("used_bytes2.del p2")
    del p1
    s("used_bytes2.del p1")
    p3 = pool.malloc(unit * 1)
    s("used_bytes2.p3")
    del p3

    clean("used_bytes_stream.start")
    p1 = pool.malloc(unit * 4)
    del p1
    with stream:
        p2 = pool.malloc(unit * 2)
    s("used_bytes_stream.p2")
    del p2

    clean("total_bytes2.start")
    p1 = pool.malloc(unit * 2)
    s("total_bytes2.p1")
    p2 = pool.malloc(unit * 4)
    s("total_bytes2.p2")
    del p1
    s("total_bytes2.del p1")
    del p2
    s("total_bytes2.del p2")
    pool.free_all_blocks()
    s("total_bytes2.free_all_blocks")
    p3 = pool.malloc(unit * 1)
    s("total_bytes2.p3")
    del p3
    pool.free_all_blocks()
    s("total_bytes2.end")

    clean("total_bytes_stream.start")
    p1 = pool.malloc(unit * 4)
    s("total_bytes_stream.p1")
    del p1
    s("total_bytes_stream.del p1")
    pool.free_all_blocks()
    s("total_bytes_stream.free_all_blocks")
    with stream:
        p2 = pool.malloc(unit * 2)
    s("total_bytes_stream.p2")
    del p2
    stream.synchronize()
    s("total_bytes_stream.stream synchronized")

    # An odd size (CuPy rounds it to 512), then one raw odd size through the
    # runtime, one past a granule, many small ones.
    clean("odd.start")
    p1 = pool.malloc(100)
    raw = cp.cuda.runtime.mallocAsync(100, cp.cuda.get_current_stream().ptr)
    s("odd.100")
    p2 = pool.malloc(3 * MiB + 1)
    s("odd.3MiB+1")
    many = [pool.malloc(4096 * (i + 1)) for i in range(64)]
    s("odd.many")
    del many
    cp.cuda.runtime.freeAsync(raw, cp.cuda.get_current_stream().ptr)
    del p1, p2
    s("odd.freed")
    cp.cuda.Device().synchronize()
    s("odd.synchronized")

    # The release threshold: kept up to it at a synchronize; a trim keeps
    # what it is asked to.
    clean("threshold.start")
    s.set_attr(RELEASE_THRESHOLD, 5 * MiB)
    big = pool.malloc(20 * MiB)
    del big
    cp.cuda.Device().synchronize()
    s("threshold.5MiB synchronized")
    s.set_attr(RELEASE_THRESHOLD, 2 ** 64 - 1)
    big = pool.malloc(24 * MiB)
    del big
    cp.cuda.Device().synchronize()
    s("threshold.unbounded synchronized")
    cp.cuda.runtime.memPoolTrimTo(s.handle, 7 * MiB)
    s("threshold.trimmed to 7MiB")
    s.set_attr(RELEASE_THRESHOLD, 0)
    cp.cuda.runtime.memPoolTrimTo(s.handle, 0)
    s("threshold.trimmed to 0")
    s.set_attr(REUSE_OPPORTUNISTIC, 0)
    opportunistic = s.attr(REUSE_OPPORTUNISTIC)
    s.set_attr(REUSE_OPPORTUNISTIC, 1)
    pool.free_all_blocks()
    return {"rows": s.rows, "opportunistic": opportunistic, "threshold": s.attr(RELEASE_THRESHOLD)}


def child_large(args):
    """test_free_all_blocks_large_chunk and test_interaction_with_CuPy_default_pool."""
    cp = cupy_or_skip()
    from cupy.cuda import memory

    pool = memory.MemoryAsyncPool()
    default_pool = cp.get_default_memory_pool()
    s = Steps(cp, pool)
    res = {}
    with cp.cuda.Device() as d:
        _, total = d.mem_info
        big, rest = int(0.7 * total), int(0.3 * total)
        mem = pool.malloc(big)
        del mem
        s("large.freed, not synchronized")
        try:
            m = default_pool.malloc(rest)
            del m
            res["default_after_async_free"] = "served"
        except memory.OutOfMemoryError:
            res["default_after_async_free"] = "out of memory"
        pool.free_all_blocks()
        s("large.free_all_blocks")
        m = default_pool.malloc(rest)
        del m
        res["default_after_free_all_blocks"] = "served"
        default_pool.free_all_blocks()

        mem = default_pool.malloc(big)
        del mem
        try:
            m = pool.malloc(rest)
            del m
            res["async_while_default_keeps"] = "served"
        except memory.OutOfMemoryError:
            res["async_while_default_keeps"] = "out of memory"
        default_pool.free_all_blocks()
        m = pool.malloc(rest)
        del m
        res["async_after_default_frees"] = "served"
        pool.free_all_blocks()
        s("large.end")
    res["rows"] = s.rows
    return res


def run(name, shim):
    return gt.once("%s-%s" % (name, shim), lambda: gt.run_child(
        __file__, name, {}, shim=shim, label="%s (%s)" % (name, "shim" if shim else "native")))


def same_rows(ref, got):
    for a, b in zip(ref, got):
        gt.expect(a == b, "step %s: native %s, under the shim %s" % (a["step"], a, b))
    gt.expect(len(ref) == len(got), "%d steps natively, %d under the shim" % (len(ref), len(got)))


def case_figures():
    ref, got = run("figures", False).result, run("figures", True).result
    for r in ref["rows"]:
        print("  %-36s total %10d used %10d free %10d" % (r["step"], r["total"], r["used"], r["free"]))
    same_rows(ref["rows"], got["rows"])
    gt.expect(ref["opportunistic"] == got["opportunistic"] == 0, "reuse flag %s / %s"
              % (ref["opportunistic"], got["opportunistic"]))
    gt.expect(ref["threshold"] == got["threshold"] == 0, "threshold %s / %s" % (ref["threshold"], got["threshold"]))


def case_cupy_assertions():
    """What CuPy's test_total_bytes2, test_total_bytes_stream and
    test_free_bytes2 assert, in both runs."""
    for shim in (False, True):
        rows = {r["step"]: r for r in run("figures", shim).result["rows"]}
        who = "shim" if shim else "native"
        for r in rows.values():
            gt.expect(r["free"] == r["total"] - r["used"], "%s %s: free != total - used" % (who, r["step"]))
        t = [rows["total_bytes2." + k]["total"] for k in ("p1", "p2", "del p1", "del p2", "p3")]
        gt.expect(len(set(t)) == 1, "%s: total_bytes2 moved without a synchronize: %s" % (who, t))
        gt.expect(rows["total_bytes2.free_all_blocks"]["total"] == 0, "%s: total after free_all_blocks" % who)
        st = rows["total_bytes_stream.p1"]["total"]
        gt.expect(st > 0 and rows["total_bytes_stream.p2"]["total"] == st,
                  "%s: total_bytes_stream %d then %d" % (who, st, rows["total_bytes_stream.p2"]["total"]))
        gt.expect(rows["total_bytes2.p2"]["free"] == rows["total_bytes2.p1"]["free"] - 4 * 512,
                  "%s: free_bytes2 did not drop by the allocation" % who)


def case_large_chunk():
    ref, got = run("large", False).result, run("large", True).result
    print("  native: %s; shim: %s" % ({k: v for k, v in ref.items() if k != "rows"},
                                       {k: v for k, v in got.items() if k != "rows"}))
    same_rows(ref["rows"], got["rows"])
    gt.expect(ref["default_after_async_free"] == "out of memory",
              "natively the default pool got memory the async pool kept: %s" % ref["default_after_async_free"])
    # The documented difference: gvmshim serves memory freed in stream
    # order to any allocation once a device-wide wait settled it.
    gt.expect(got["default_after_async_free"] == "served",
              "under the shim: %s" % got["default_after_async_free"])


def case_interaction():
    ref, got = run("large", False).result, run("large", True).result
    for k in ("async_while_default_keeps", "async_after_default_frees", "default_after_free_all_blocks"):
        gt.expect(ref[k] == got[k], "%s: native %s, shim %s" % (k, ref[k], got[k]))
    gt.expect(ref["async_while_default_keeps"] == "out of memory", "natively %s" % ref["async_while_default_keeps"])


def main():
    return gt.suite_main("cupy-pools", "cupy", {"figures": child_figures, "large": child_large},
                         [("figures_native_vs_shim", case_figures), ("cupy_assertions", case_cupy_assertions),
                          ("free_all_blocks_large_chunk", case_large_chunk),
                          ("interaction_with_default_pool", case_interaction)])


if __name__ == "__main__":
    sys.exit(main())
