#!/usr/bin/env python3
"""The Python bindings (python/gvmshim.py) on a process under the shim with
the simulated driver: tag, query, the three kinds of pause, resume, and the
errors a user sees. The child allocates through the driver API with ctypes
(no framework needed) and reads the memory through its pointer, which the
simulated driver backs with host memory.

    check_python.py LIBGVMSHIM SIMCUDA_DIR PYTHON_DIR
"""
import ctypes
import os
import subprocess
import sys

MiB = 1 << 20


def child(python_dir, touch=False):
    sys.path.insert(0, python_dir)
    cu = ctypes.CDLL("libcuda.so.1")
    assert cu.cuInit(0) == 0
    ctx = ctypes.c_void_p()
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    import gvmshim
    n = 24 * MiB
    with gvmshim.tag("weights"):
        p = ctypes.c_uint64()
        assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0
    buf = (ctypes.c_ubyte * n).from_address(p.value)
    for i in range(0, n, 4096):
        buf[i] = (i // 4096) % 251

    if touch:   # what the flag documents: paused memory faults when touched
        gvmshim.pause("weights", unmapped=True)
        print("read %d" % buf[4096])
        return 0

    def intact():
        return all(buf[i] == (i // 4096) % 251 for i in range(0, n, 4096))

    def state():
        q = gvmshim.query(p.value)
        return q.paused, q.location

    checks = []
    gvmshim.pause("weights")
    checks.append(("keep: paused on host", state() == (1, -1)))
    checks.append(("keep: readable while paused", intact()))
    gvmshim.resume("weights")
    checks.append(("keep: back on device 0, intact", state() == (0, 0) and intact()))
    gvmshim.pause("weights", unmapped=True)
    checks.append(("unmapped: paused, its copy on host", state() == (1, -1)))
    gvmshim.resume("weights")
    checks.append(("unmapped: back on device 0, intact", state() == (0, 0) and intact()))
    try:
        gvmshim.pause("weights", discard=True, unmapped=True)
        checks.append(("discard and unmapped together refused", False))
    except gvmshim.GvmError as e:
        checks.append(("discard and unmapped together refused (%s)" % e, state() == (0, 0)))
    gvmshim.pause("weights", discard=True)
    checks.append(("discard: paused, nowhere", state()[0] == 1))
    gvmshim.resume()
    checks.append(("discard: resumed zeroed", state() == (0, 0) and all(buf[i] == 0 for i in range(0, n, 4096))))
    failed = 0
    for what, ok in checks:
        print("%s %s" % ("ok  " if ok else "FAIL", what))
        failed += not ok
    return 1 if failed else 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] in ("--child", "--touch"):
        return child(sys.argv[2], sys.argv[1] == "--touch")
    lib, simdir, python_dir = sys.argv[1:4]
    env = dict(os.environ, LD_PRELOAD=lib,
               LD_LIBRARY_PATH=simdir + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""))
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", python_dir], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    print(r.stdout, end="")
    failed = r.returncode != 0
    if failed:
        print("child exit %d" % r.returncode)
    t = subprocess.run([sys.executable, os.path.abspath(__file__), "--touch", python_dir], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    faulted = t.returncode == -11 and "read " not in t.stdout
    print("%s touching memory paused with unmapped=True faults (exit %d)" % ("ok  " if faulted else "FAIL",
                                                                              t.returncode))
    if not faulted:
        print(t.stdout[-2000:], end="")
    return 1 if failed or not faulted else 0


if __name__ == "__main__":
    sys.exit(main())
