#!/usr/bin/env python3
"""CuPy under gvmshim: the same results with and without the shim, pointers
served by gvmshim, and the same results when the working set is 1.5x the
device limit with GVM_SPILL=host. The parent runs without the shim."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.join(HERE, "..", "..", "python")
LIB = os.environ.get("GVM_TEST_LIB", "")

JOB = r"""
import cupy as cp
cp.random.seed(0)
N, K = {n}, {k}
mats = [cp.random.standard_normal((N, N), dtype=cp.float32) / N ** 0.5 for _ in range(K)]
x = cp.random.standard_normal((N, 64), dtype=cp.float32)
w = cp.zeros((N, 64), dtype=cp.float32)
for step in range(3):                       # a little gradient descent touching every matrix
    y = x
    for m in mats:
        y = cp.tanh(m @ y)
    g = y - w
    w += 0.1 * g
    print(repr(float(cp.abs(g).sum())), repr(float(y.sum())))
{probe}
"""

PROBE = r"""
import gvmshim
i = gvmshim.query(mats[0].data.ptr)
print("served", i.device, i.size >= N * N * 4)
"""


def child(code, shim, env=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("GVM_") or k.startswith("GVM_TEST_")}
    e.pop("LD_PRELOAD", None)
    e.update(env or {})
    e["PYTHONPATH"] = PYDIR + os.pathsep + e.get("PYTHONPATH", "")
    path = None
    if shim:
        e["LD_PRELOAD"] = LIB
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        e["GVM_STATS"] = path
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError("child failed:\n%s\n%s" % (r.stdout[-2000:], r.stderr[-2000:]))
    st = json.load(open(path)) if path else None
    if path:
        os.unlink(path)
    return r.stdout.strip().splitlines(), st


def main():
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() == 0:
            raise RuntimeError
    except Exception:
        print("no cupy or no GPU: skipped")
        return 77
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        passed += ok
        failed += not ok
        if not ok:
            print("FAIL:", what)

    small = JOB.format(n=2048, k=4, probe="")
    native, _ = child(small, False)
    shim, st = child(JOB.format(n=2048, k=4, probe=PROBE), True)
    check(shim[:-1] == native, "results differ under the shim: %s vs %s" % (native, shim[:-1]))
    check(shim[-1] == "served 0 True", "cupy pointer not served: %s" % shim[-1])
    check(st["allocations_total"] > 0, "nothing served")
    # 24 matrices of 8192^2 fp32 = 6 GiB against a 4 GiB limit.
    big = JOB.format(n=8192, k=24, probe="")
    native, _ = child(big, False)
    spilled, st = child(big, True, {"GVM_DEVICE_LIMIT": "4G", "GVM_SPILL": "host"})
    check(spilled == native, "results differ when spilling: %s vs %s" % (native, spilled))
    check(st["spills"] > 0, "no spill happened")
    print("cupy spill: %d spills, %.1f GiB moved" % (st["spills"], st["bytes_migrated"] / 2 ** 30))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
