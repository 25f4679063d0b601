"""torch_memory_saver's Python API, served by gvmshim.

SGLang, slime and verl release and resume GPU memory through the singleton
`torch_memory_saver.torch_memory_saver`. This package answers the same
calls in a process running under gvmshim (scripts/gvmrun), so they run
unchanged with gvmshim's pause in place of torch_memory_saver's own hook:

    from torch_memory_saver import torch_memory_saver
    with torch_memory_saver.region(tag="weights", enable_cpu_backup=True):
        model = build_model()
    with torch_memory_saver.region(tag="kv_cache"):
        kv = torch.empty(...)
    torch_memory_saver.pause("kv_cache")     # contents dropped
    torch_memory_saver.pause("weights")      # contents kept in host memory
    torch_memory_saver.resume("weights")
    torch_memory_saver.resume("kv_cache")

What each call does here:
- region(tag, enable_cpu_backup): the allocations made inside are tagged
  `tag` in gvmshim and drawn from a PyTorch MemPool of their own per tag
  and device, so the caching allocator never puts two tags in one segment.
- pause(tag): waits for the devices, then releases the tag's device memory
  with every pointer kept. A tag with a CPU backup keeps its contents in
  host memory; one without loses them (they read as zeroes after resume),
  as with torch_memory_saver, unless GVM_TMS_DISCARD=0 keeps a copy of
  those too. GVM_TMS_UNMAPPED=1 keeps the copies mapped nowhere (faster;
  touching paused memory then faults, as under torch_memory_saver).
  pause() pauses every tag made through region(), each as above, then the
  rest of the process, contents kept (slime's whole-process pause).
- resume(tag): brings the memory back in place; resume() brings back all.
- Lenient where torch_memory_saver exits: pausing what is paused and
  resuming what is not do nothing, and an allocation made inside a paused
  tag is live (a later resume leaves it as it is).
- disable(): allocations inside are untagged and in a pool of their own
  (a library's buffers made inside a region: never paused by a tag).
- cuda_graph(...): torch.cuda.graph capturing under the tag, its memory
  drawn from the tag's pool.
- configure_subprocess(): children started inside run under gvmshim too,
  with this package ahead on their PYTHONPATH.
- hook_mode ("preload" or "torch") and memory_margin_bytes are accepted;
  gvmshim's interposition is the same either way.
"""
import contextlib
import logging
import os
import sys
import threading

# The directory this package lies in: python/ of the source tree (beside
# gvmshim.py), or gvmshim_tms/ inside the site-packages gvmshim.py was
# installed into.
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
try:
    import gvmshim
except ImportError:
    sys.path.append(os.path.dirname(_HERE))
    import gvmshim

__all__ = ["TorchMemorySaver", "torch_memory_saver", "configure_subprocess"]

_log = logging.getLogger(__name__)
_HOOK_MODES = ("preload", "torch")
_GVM_ERR_BUSY = -7       # include/gvmshim.h: left in place (shared with another process)
_GVM_ERR_INACTIVE = -8   # gvmshim serves no allocation yet: nothing to pause


def _env_flag(name, default):
    v = os.environ.get(name, "").strip().lower()
    if not v:
        return default
    return v not in ("0", "false", "no", "off")


def _torch():
    """torch, or None where it is missing (the tags alone then apply)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def _synchronize():
    """Waits for every device the program used: torch_memory_saver's callers
    guarantee idleness, vLLM synchronizes; gvmshim's moves wait for queued
    work too, and this makes the wait the program's."""
    torch = _torch()
    if torch is None or not torch.cuda.is_initialized():
        return
    for d in range(torch.cuda.device_count()):
        torch.cuda.synchronize(d)


class TorchMemorySaver:
    def __init__(self):
        self._lock = threading.RLock()
        self._backup = {}      # tag -> whether pause keeps its contents
        self._pools = {}       # (kind, tag, device) -> torch.cuda.MemPool
        self._paused = set()   # tags paused through pause() and not resumed since
        self._hook_mode = "preload"
        self._margin = 0
        self._retain_cpu_backup = False
        self._warned = False

    # ---- properties torch_memory_saver has -------------------------------------

    @property
    def enabled(self):
        return True

    @property
    def hook_mode(self):
        return self._hook_mode

    @hook_mode.setter
    def hook_mode(self, mode):
        if mode not in _HOOK_MODES:
            raise ValueError("hook_mode must be one of %s, not %r" % (", ".join(_HOOK_MODES), mode))
        self._hook_mode = mode

    @property
    def memory_margin_bytes(self):
        return self._margin

    @memory_margin_bytes.setter
    def memory_margin_bytes(self, value):
        if int(value) < 0:
            raise ValueError("memory_margin_bytes must be at least 0, not %r" % (value,))
        self._margin = int(value)

    @property
    def retain_cpu_backup(self):
        return self._retain_cpu_backup

    @retain_cpu_backup.setter
    def retain_cpu_backup(self, value):
        self._retain_cpu_backup = bool(value)

    def _ensure_initialized(self):
        pass

    def configure_subprocess(self):
        return configure_subprocess()

    # ---- regions ------------------------------------------------------------------

    def _gvm(self):
        """Whether gvmshim serves this process; says once when it does not."""
        if gvmshim.available():
            return True
        if not self._warned:
            self._warned = True
            _log.warning("torch_memory_saver (gvmshim): gvmshim is not loaded in this process (run it under "
                         "gvmrun); regions are not tagged and pause/resume release nothing")
        return False

    def _pool(self, kind, tag):
        """The MemPool for (kind, tag) on the current device, or None without
        torch's MemPool (then the tag alone separates nothing in segments)."""
        torch = _torch()
        if torch is None or not hasattr(torch.cuda, "MemPool") or not hasattr(torch.cuda, "use_mem_pool"):
            return None
        key = (kind, tag, torch.cuda.current_device())
        with self._lock:
            if key not in self._pools:
                self._pools[key] = torch.cuda.MemPool()
            return self._pools[key]

    @staticmethod
    def _using(pool):
        if pool is None:
            return contextlib.nullcontext()
        return _torch().cuda.use_mem_pool(pool)

    def _tagged(self, tag):
        if not self._gvm():
            return contextlib.nullcontext()
        return gvmshim.tag(tag)

    def _remember(self, tag, backup):
        if not isinstance(tag, str) or not tag:
            raise ValueError("a tag is a non-empty string, not %r" % (tag,))
        with self._lock:
            # One pause per tag: if any region of it keeps a backup, all do.
            self._backup[tag] = self._backup.get(tag, False) or bool(backup)

    @contextlib.contextmanager
    def region(self, tag="default", enable_cpu_backup=False, enable_disk_backup=False, cpu_backup_backend=None):
        self._remember(tag, enable_cpu_backup or enable_disk_backup)
        pool = self._pool("region", tag)
        with self._tagged(tag), self._using(pool):
            yield

    @contextlib.contextmanager
    def disable(self):
        pool = self._pool("disabled", None)
        with self._tagged(""), self._using(pool):
            yield

    @contextlib.contextmanager
    def cuda_graph(self, cuda_graph, pool=None, stream=None, capture_error_mode="global", tag="default",
                   enable_cpu_backup=False, cpu_backup_backend=None):
        torch = _torch()
        if torch is None:
            raise RuntimeError("torch_memory_saver.cuda_graph needs torch")
        self._remember(tag, enable_cpu_backup)
        if pool is None:   # a graph's private pool of its own, under the tag
            own = self._pool("graph", tag)
            pool = own.id if own is not None else None
        with self._tagged(tag), torch.cuda.graph(cuda_graph, pool=pool, stream=stream,
                                                 capture_error_mode=capture_error_mode):
            yield

    # ---- pause and resume --------------------------------------------------------

    def _flags(self, tag):
        keep = self._backup.get(tag, False) or not _env_flag("GVM_TMS_DISCARD", True)
        unmapped = _env_flag("GVM_TMS_UNMAPPED", False)
        return {"discard": not keep, "unmapped": keep and unmapped}

    @staticmethod
    def _lenient(what, fn, *args, **kw):
        """fn(...), except where torch_memory_saver would have nothing to do
        or gvmshim leaves memory in place on purpose: before gvmshim serves
        any allocation (nothing to pause), and memory shared with another
        process (it stays where it is, said once per call). False when
        gvmshim serves nothing yet."""
        try:
            fn(*args, **kw)
        except gvmshim.GvmError as e:
            if e.status == _GVM_ERR_INACTIVE:
                return False
            if e.status != _GVM_ERR_BUSY:
                raise
            _log.warning("torch_memory_saver (gvmshim): %s: some memory is shared with another process and stays "
                         "in place", what)
        return True

    def _pause_one(self, tag):
        if tag in self._paused:
            return   # paused already: allocations made since stay live
        if self._lenient("pause(%r)" % tag, gvmshim.pause, tag, **self._flags(tag)):
            self._paused.add(tag)

    def pause(self, tag=None):
        if not self._gvm():
            return
        _synchronize()
        with self._lock:
            tags = [tag] if tag is not None else sorted(self._backup)
            for t in tags:
                self._pause_one(t)
            if tag is None and None not in self._paused:
                # The rest of the process: its contents are kept.
                if self._lenient("pause()", gvmshim.pause, None):
                    self._paused.add(None)

    def resume(self, tag=None):
        if not self._gvm():
            return
        with self._lock:
            # Resumes what is paused only: twice is harmless.
            self._lenient("resume(%r)" % tag, gvmshim.resume, tag)
            if tag is None:
                self._paused.clear()
            else:
                self._paused.discard(tag)


torch_memory_saver = TorchMemorySaver()


@contextlib.contextmanager
def configure_subprocess():
    """Children started inside run under gvmshim (libgvmshim.so first on
    LD_PRELOAD) and import this package (its directory first on
    PYTHONPATH); the environment is restored on the way out."""
    lib = gvmshim.library_path()
    saved = {k: os.environ.get(k) for k in ("LD_PRELOAD", "PYTHONPATH")}
    try:
        if lib:
            rest = [e for e in (saved["LD_PRELOAD"] or "").replace(" ", ":").split(":") if e and e != lib]
            os.environ["LD_PRELOAD"] = ":".join([lib] + rest)
        paths = [p for p in (saved["PYTHONPATH"] or "").split(os.pathsep) if p and p != _HERE]
        os.environ["PYTHONPATH"] = os.pathsep.join([_HERE] + paths)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
