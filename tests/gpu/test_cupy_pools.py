#!/usr/bin/env python3
"""CuPy's MemoryAsyncPool (cudaMallocAsync on the device's default pool)
natively and under the shim: the pool's figures, which CuPy reads with
cudaMemPoolGetAttribute (total_bytes() is RESERVED_MEM_CURRENT,
used_bytes() USED_MEM_CURRENT, free_bytes() their difference), must be the
same at every step of the sequences of CuPy's own TestMemoryAsyncPool
cases, and of a few more (odd sizes, the release threshold, the highs and
their reset, a trim that keeps some). The driver counts each allocation at
its requested size and reserves in 32 MiB chunks (core/pooluse.h).

  figures_native_vs_shim          every figure at every step, equal
  cupy_assertions                 CuPy's assertions on those figures hold
                                  in both runs (total fixed without a
                                  synchronize, free = total - used, ...)
  free_all_blocks_large_chunk     70 % of the device from the async pool,
                                  freed without a synchronize, then 30 %
                                  from CuPy's default pool: natively
                                  out of memory (the pool keeps freed
                                  memory until a synchronize); under the
                                  shim served (docs/how-it-works.md,
                                  stream-ordered pools: the difference is
                                  deliberate, expected and printed, not a
                                  failure); the pool's figures equal in
                                  both; after free_all_blocks() both serve
                                  it
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
    # runtime (the driver counts it unrounded), one past a 32 MiB chunk, many
    # small ones.
    clean("odd.start")
    p1 = pool.malloc(100)
    raw = cp.cuda.runtime.mallocAsync(100, cp.cuda.get_current_stream().ptr)
    s("odd.100")
    p2 = pool.malloc(32 * MiB + 1)
    s("odd.32MiB+1")
    many = [pool.malloc(4096 * (i + 1)) for i in range(64)]
    s("odd.many")
    del many
    cp.cuda.runtime.freeAsync(raw, cp.cuda.get_current_stream().ptr)
    del p1, p2
    s("odd.freed")
    cp.cuda.Device().synchronize()
    s("odd.synchronized")

    # The release threshold: a synchronize releases whole chunks down to it;
    # a trim keeps what it is asked to. CuPy's MemoryAsyncPool takes the
    # release threshold as its own soft limit (set_limit(); its malloc
    # refuses to grow the pool past it), so these allocations go through the
    # runtime directly, as other users of the same pool would.
    cupy_threshold = s.attr(RELEASE_THRESHOLD)
    ptr = cp.cuda.get_current_stream().ptr

    def alloc_free(size):
        cp.cuda.runtime.freeAsync(cp.cuda.runtime.mallocAsync(size, ptr), ptr)

    clean("threshold.start")
    s.set_attr(RELEASE_THRESHOLD, 5 * MiB)
    alloc_free(20 * MiB)
    s("threshold.5MiB freed")
    cp.cuda.Device().synchronize()
    s("threshold.5MiB synchronized")
    s.set_attr(RELEASE_THRESHOLD, 40 * MiB)
    alloc_free(72 * MiB)
    s("threshold.40MiB freed")
    cp.cuda.Device().synchronize()
    s("threshold.40MiB synchronized")
    s.set_attr(RELEASE_THRESHOLD, 2 ** 64 - 1)
    alloc_free(48 * MiB)
    cp.cuda.Device().synchronize()
    s("threshold.unbounded synchronized")
    cp.cuda.runtime.memPoolTrimTo(s.handle, 40 * MiB)
    s("threshold.trimmed to 40MiB")
    cp.cuda.runtime.memPoolTrimTo(s.handle, 0)
    s("threshold.trimmed to 0")
    s.set_attr(RELEASE_THRESHOLD, cupy_threshold)
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
    # CuPy's pool sets the threshold at its start (its limit); restored.
    gt.expect(ref["threshold"] == got["threshold"], "threshold %s / %s" % (ref["threshold"], got["threshold"]))


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
    for r in ref["rows"]:
        print("  %-36s total %14d used %14d" % (r["step"], r["total"], r["used"]))
    same_rows(ref["rows"], got["rows"])
    for k in ("default_after_async_free", "default_after_free_all_blocks"):
        print("  %-32s native: %-13s shim: %s" % (k, ref[k], got[k]))
    # The documented difference (docs/how-it-works.md, stream-ordered
    # pools): natively the pool keeps what was freed in stream order until a
    # synchronize, so CuPy's default pool is refused (what CuPy's own
    # test_free_all_blocks_large_chunk expects); gvmshim serves it. Expected
    # both ways, not a failure; only the shim's side is gvmshim's to keep.
    if ref["default_after_async_free"] == "out of memory":
        print("  documented difference: natively out of memory, under the shim %s"
              % got["default_after_async_free"])
    else:
        print("  note: natively %s too; the documented difference did not show on this driver"
              % ref["default_after_async_free"])
    gt.expect(got["default_after_async_free"] == "served",
              "under the shim: %s (memory freed in stream order and settled is served)"
              % got["default_after_async_free"])
    gt.expect(ref["default_after_free_all_blocks"] == got["default_after_free_all_blocks"] == "served",
              "after free_all_blocks(): native %s, shim %s"
              % (ref["default_after_free_all_blocks"], got["default_after_free_all_blocks"]))


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
