#!/usr/bin/env python3
"""The torch_memory_saver drop-in (python/torch_memory_saver) on a process
under the shim with the simulated driver, as SGLang and slime call it. A
stand-in `torch` (written to a temporary directory) records which MemPool
is in use and which syncs and graph captures were asked for; the
"tensors" are cuMemAlloc'd through the shim with ctypes while a region is
open, so gvmshim tags them as it would PyTorch's segments.

    check_tms.py LIBGVMSHIM SIMCUDA_DIR PYTHON_DIR
"""
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile

MiB = 1 << 20

FAKE_TORCH = '''
"""A stand-in for the parts of torch the drop-in calls."""
import contextlib

calls = []


class _Cuda:
    active = []          # the MemPools in use, innermost last
    graphs = []          # (graph, pool, stream, mode) captured
    synced = []

    class MemPool:
        made = 0

        def __init__(self):
            _Cuda.MemPool.made += 1
            self.id = (0, _Cuda.MemPool.made)

    @staticmethod
    @contextlib.contextmanager
    def use_mem_pool(pool):
        _Cuda.active.append(pool)
        try:
            yield
        finally:
            _Cuda.active.pop()

    @staticmethod
    @contextlib.contextmanager
    def graph(g, pool=None, stream=None, capture_error_mode="global"):
        _Cuda.graphs.append((g, pool, stream, capture_error_mode))
        yield

    @staticmethod
    def is_initialized():
        return True

    @staticmethod
    def device_count():
        return 2

    @staticmethod
    def current_device():
        return 0

    @staticmethod
    def synchronize(device=None):
        _Cuda.synced.append(device)


cuda = _Cuda
'''


class Child:
    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")
        ctx = ctypes.c_void_p()
        assert self.cu.cuInit(0) == 0
        assert self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
        assert self.cu.cuCtxSetCurrent(ctx) == 0
        import gvmshim
        self.gvm = gvmshim
        self.checks = []

    def alloc(self, n, seed):
        p = ctypes.c_uint64()
        assert self.cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0
        buf = (ctypes.c_ubyte * n).from_address(p.value)
        for i in range(0, n, 4096):
            buf[i] = (i // 4096 + seed) % 251
        return (p.value, n, seed)

    def intact(self, a):
        p, n, seed = a
        buf = (ctypes.c_ubyte * n).from_address(p)
        return all(buf[i] == (i // 4096 + seed) % 251 for i in range(0, n, 4096))

    def zero(self, a):
        p, n, _ = a
        buf = (ctypes.c_ubyte * n).from_address(p)
        return all(buf[i] == 0 for i in range(0, n, 4096))

    def state(self, a):
        q = self.gvm.query(a[0])
        return q.paused, q.location

    def check(self, what, ok):
        self.checks.append((what, ok))

    def report(self):
        failed = 0
        for what, ok in self.checks:
            print("%s %s" % ("ok  " if ok else "FAIL", what))
            failed += not ok
        return 1 if failed else 0


def child_sglang(c):
    """SGLang's pattern: weights with a backup, the KV cache without, a graph."""
    import torch
    import torch_memory_saver as tms_mod
    from torch_memory_saver import torch_memory_saver as tms
    c.check("enabled", tms.enabled is True)
    tms.hook_mode = "preload"
    tms.hook_mode = "torch"
    try:
        tms.hook_mode = "ptrace"
        c.check("an unknown hook_mode is refused", False)
    except ValueError:
        c.check("an unknown hook_mode is refused", True)
    tms.memory_margin_bytes = 1 << 30
    c.check("memory_margin_bytes kept", tms.memory_margin_bytes == 1 << 30)
    c.check("TorchMemorySaver and configure_subprocess exported",
            isinstance(tms, tms_mod.TorchMemorySaver) and callable(tms_mod.configure_subprocess))

    with tms.region(tag="weights", enable_cpu_backup=True):
        weights_pool = torch.cuda.active[-1] if torch.cuda.active else None
        w = c.alloc(24 * MiB, 1)
    with tms.region("kv_cache"):
        kv_pool = torch.cuda.active[-1] if torch.cuda.active else None
        kv = c.alloc(24 * MiB, 2)
        with tms.disable():
            off_pool = torch.cuda.active[-1]
            off = c.alloc(8 * MiB, 3)
        c.check("the region's pool again after disable()", torch.cuda.active[-1] is kv_pool)
    with tms.region("kv_cache"):
        c.check("one pool per tag, reused", torch.cuda.active[-1] is kv_pool)
    c.check("a pool per tag, another for disable()",
            None not in (weights_pool, kv_pool) and len({id(weights_pool), id(kv_pool), id(off_pool)}) == 3)
    c.check("no pool in use outside the regions", torch.cuda.active == [])
    plain = c.alloc(8 * MiB, 4)
    graph = object()
    with tms.cuda_graph(cuda_graph=graph, tag="cuda_graph"):
        g = c.alloc(4 * MiB, 5)
    c.check("cuda_graph captures with the tag's pool",
            torch.cuda.graphs and torch.cuda.graphs[-1][0] is graph and torch.cuda.graphs[-1][1] is not None
            and torch.cuda.graphs[-1][3] == "global")

    synced = len(torch.cuda.synced)
    tms.pause("kv_cache")
    c.check("pause synchronizes every device first", len(torch.cuda.synced) == synced + 2)
    c.check("kv_cache paused, its contents dropped", c.state(kv) == (1, c.gvm.NOWHERE))
    c.check("weights, disable()'s buffer and untagged memory untouched",
            c.state(w) == (0, 0) and c.state(off) == (0, 0) and c.state(plain) == (0, 0))
    tms.pause("kv_cache")   # twice: nothing more
    with tms.region("kv_cache"):
        late = c.alloc(8 * MiB, 6)
    c.check("an allocation inside a paused tag is live", c.state(late) == (0, 0) and c.intact(late))
    tms.pause("kv_cache")
    c.check("a repeated pause leaves it live", c.state(late) == (0, 0))
    tms.pause("weights")
    c.check("weights paused, kept on host and readable", c.state(w) == (1, c.gvm.HOST) and c.intact(w))
    tms.pause("cuda_graph")
    c.check("the graph's memory paused", c.state(g)[0] == 1)
    for t in ("cuda_graph", "weights", "kv_cache"):   # SGLang's resume order
        tms.resume(t)
        tms.resume(t)
    c.check("weights back on device 0, intact", c.state(w) == (0, 0) and c.intact(w))
    c.check("kv_cache back, zeroed", c.state(kv) == (0, 0) and c.zero(kv))
    c.check("the allocation made while paused intact", c.state(late) == (0, 0) and c.intact(late))
    c.check("the rest intact", c.intact(off) and c.intact(plain) and c.state(g) == (0, 0))

    # pause(): every tag, then the rest of the process, contents kept where backed up.
    tms.pause()
    c.check("pause() pauses every tag", all(c.state(a)[0] == 1 for a in (w, kv, late, g)))
    tms.pause()
    tms.resume()
    c.check("resume() brings them all back", all(c.state(a) == (0, 0) for a in (w, kv, late, g, off, plain)))
    c.check("a backed-up tag and untagged memory keep their contents over pause()",
            c.intact(w) and c.intact(off) and c.intact(plain))
    try:
        tms.region(tag="")
        with tms.region(tag=""):
            pass
        c.check("an empty tag is refused", False)
    except ValueError:
        c.check("an empty tag is refused", True)
    return c.report()


def child_keep(c):
    """GVM_TMS_DISCARD=0: tags without a backup keep their contents too."""
    from torch_memory_saver import torch_memory_saver as tms
    with tms.region("kv_cache"):
        kv = c.alloc(16 * MiB, 7)
    tms.pause("kv_cache")
    c.check("GVM_TMS_DISCARD=0: kv_cache kept on host", c.state(kv) == (1, c.gvm.HOST) and c.intact(kv))
    tms.resume("kv_cache")
    c.check("GVM_TMS_DISCARD=0: back intact", c.state(kv) == (0, 0) and c.intact(kv))
    return c.report()


def child_no_torch(c):
    """Without torch: the tags alone, no pool."""
    sys.modules["torch"] = None   # import torch fails, whatever is installed
    from torch_memory_saver import torch_memory_saver as tms
    tms.pause("weights")   # before gvmshim serves anything: nothing to do, and no error
    tms.resume("weights")
    tms.pause("weights")
    with tms.region("weights", enable_cpu_backup=True):
        w = c.alloc(8 * MiB, 8)
    tms.pause("weights")
    c.check("no torch: the region is tagged and pauses", c.state(w) == (1, c.gvm.HOST))
    tms.resume("weights")
    c.check("no torch: back intact", c.state(w) == (0, 0) and c.intact(w))
    return c.report()


def child_subprocess(c, lib):
    """configure_subprocess(): a child started inside runs under the shim
    and imports the drop-in; the environment comes back after."""
    import torch_memory_saver as tms_mod
    before = dict(os.environ)
    code = ("import ctypes, torch_memory_saver, gvmshim; "
            "print(hasattr(ctypes.CDLL(None), 'gvm_query'), torch_memory_saver.__file__, gvmshim.library_path())")
    env_probe = dict(os.environ)
    env_probe.pop("LD_PRELOAD", None)
    env_probe.pop("PYTHONPATH", None)
    os.environ.clear()
    os.environ.update(env_probe)
    with tms_mod.configure_subprocess():
        inside = os.environ.get("LD_PRELOAD", "")
        out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=60).stdout.split()
    after = dict(os.environ)
    os.environ.clear()
    os.environ.update(before)
    c.check("the library this process runs under is found: %s" % c.gvm.library_path(),
            os.path.realpath(c.gvm.library_path() or "") == os.path.realpath(lib))
    c.check("LD_PRELOAD names it inside configure_subprocess()", inside.split(":")[0] == c.gvm.library_path())
    from torch_memory_saver.utils import get_binary_path_from_package
    c.check("slime's get_binary_path_from_package names it",
            get_binary_path_from_package("torch_memory_saver_hook_mode_preload") == c.gvm.library_path())
    c.check("a child started inside runs under the shim with this drop-in: %s" % " ".join(out),
            len(out) == 3 and out[0] == "True" and os.path.dirname(os.path.dirname(out[1])) == tms_mod._HERE)
    c.check("the environment is restored after", after == env_probe)
    return c.report()


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        which, python_dir = sys.argv[2], sys.argv[3]
        sys.path.insert(0, python_dir)
        c = Child()
        if which == "subprocess":
            return child_subprocess(c, sys.argv[4])
        return {"sglang": child_sglang, "keep": child_keep, "no-torch": child_no_torch}[which](c)
    lib, simdir, python_dir = sys.argv[1:4]
    fake = tempfile.mkdtemp(prefix="fake-torch-")
    try:
        return run_children(lib, simdir, python_dir, fake)
    finally:
        shutil.rmtree(fake, ignore_errors=True)


def run_children(lib, simdir, python_dir, fake):
    os.makedirs(os.path.join(fake, "torch"))
    with open(os.path.join(fake, "torch", "__init__.py"), "w") as f:
        f.write(FAKE_TORCH)
    base = dict(os.environ, LD_PRELOAD=lib,
                LD_LIBRARY_PATH=simdir + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""))
    base = {k: v for k, v in base.items() if k not in ("GVM_TMS_DISCARD", "GVM_TMS_UNMAPPED")}
    runs = [("sglang", {"PYTHONPATH": fake}), ("keep", {"PYTHONPATH": fake, "GVM_TMS_DISCARD": "0"}),
            ("no-torch", {"PYTHONPATH": ""}), ("subprocess", {"PYTHONPATH": fake})]
    failed = 0
    for which, extra in runs:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", which, python_dir] + \
              ([lib] if which == "subprocess" else [])
        r = subprocess.run(cmd, env=dict(base, **extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
        print("-- %s" % which)
        print(r.stdout, end="")
        if r.returncode != 0:
            print("child %s exit %d" % (which, r.returncode))
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
