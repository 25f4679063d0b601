"""Python access to gvmshim's API from a process started under the shim.

    import gvmshim
    if gvmshim.available():
        info = gvmshim.query(tensor.data_ptr())
        gvmshim.migrate(tensor.data_ptr(), gvmshim.HOST)
        with gvmshim.tag("weights"):
            model = build_model()
        gvmshim.pause("weights")
        gvmshim.resume("weights")
        with gvmshim.tag(""):          # untagged, inside a tagged block too
            buffers = make_buffers()

The functions are looked up in the running process (ctypes.CDLL(None)),
so nothing is loaded that the preload did not already load.
"""
import ctypes
import contextlib
import os

HOST = -1
MIXED = -2
NOWHERE = -3
PAUSE_KEEP = 0
PAUSE_DISCARD = 1
PAUSE_UNMAPPED = 2


class Info(ctypes.Structure):
    _fields_ = [
        ("base", ctypes.c_void_p),
        ("size", ctypes.c_size_t),
        ("device", ctypes.c_int),
        ("location", ctypes.c_int),
        ("packed", ctypes.c_int),
        ("chunk_base", ctypes.c_void_p),
        ("chunk_size", ctypes.c_size_t),
        ("reserved", ctypes.c_size_t),
        ("pieces", ctypes.c_int),
        ("aliases", ctypes.c_int),
        ("paused", ctypes.c_int),
        ("bytes_on_device", ctypes.c_size_t),
        ("bytes_on_host", ctypes.c_size_t),
        ("last_driver_error", ctypes.c_int),
        ("buffer_id", ctypes.c_ulonglong),
    ]

    def as_dict(self):
        return {name: getattr(self, name) for name, _ in self._fields_}


class GvmError(RuntimeError):
    def __init__(self, status, what, reason=None):
        self.status = status
        # Without the library there is no gvm_strerror to ask.
        super().__init__("%s: %s (%d)" % (what, reason or strerror(status), status))


_lib = None


def _api():
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(None)
        if not hasattr(lib, "gvm_query"):
            raise GvmError(-8, "gvmshim", "not loaded in this process (run it under gvmrun)")
        lib.gvm_strerror.restype = ctypes.c_char_p
        lib.gvm_query.argtypes = [ctypes.c_void_p, ctypes.POINTER(Info)]
        lib.gvm_migrate.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.gvm_alias.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.gvm_unalias.argtypes = [ctypes.c_void_p]
        lib.gvm_realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.gvm_tag_push.argtypes = [ctypes.c_char_p]
        lib.gvm_pause.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.gvm_resume.argtypes = [ctypes.c_char_p]
        _lib = lib
    return _lib


def available():
    try:
        _api()
        return True
    except GvmError:
        return False


def strerror(status):
    return _api().gvm_strerror(status).decode()


def _check(status, what):
    if status != 0:
        raise GvmError(status, what)


def query(ptr):
    info = Info()
    _check(_api().gvm_query(ptr, ctypes.byref(info)), "gvm_query")
    return info


def migrate(ptr, location):
    _check(_api().gvm_migrate(ptr, location), "gvm_migrate")


def alias(ptr):
    out = ctypes.c_void_p()
    _check(_api().gvm_alias(ptr, ctypes.byref(out)), "gvm_alias")
    return out.value


def unalias(ptr):
    _check(_api().gvm_unalias(ptr), "gvm_unalias")


def realloc(ptr, size):
    _check(_api().gvm_realloc(ptr, size), "gvm_realloc")


@contextlib.contextmanager
def tag(name):
    _check(_api().gvm_tag_push(name.encode()), "gvm_tag_push")
    try:
        yield
    finally:
        _api().gvm_tag_pop()


def pause(name=None, discard=False, unmapped=False):
    """Releases the device memory of `name`'s allocations (None: every
    allocation of the process); the contents wait in host memory (readable
    there, or with unmapped=True mapped nowhere: faster, and touching them
    faults), or with discard=True (a name only) are dropped."""
    flags = (PAUSE_DISCARD if discard else PAUSE_KEEP) | (PAUSE_UNMAPPED if unmapped else 0)
    _check(_api().gvm_pause(name.encode() if name else None, flags), "gvm_pause")


def resume(name=None):
    """Brings `name`'s paused allocations back (None: every paused one)."""
    _check(_api().gvm_resume(name.encode() if name else None), "gvm_resume")


def library_path():
    """The path of the libgvmshim.so this process runs under (what a child
    needs on LD_PRELOAD), or None when it runs under none."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split(None, 5)
                if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith("libgvmshim.so"):
                    return fields[5].strip()
    except OSError:
        pass
    for entry in os.environ.get("LD_PRELOAD", "").replace(" ", ":").split(":"):
        if os.path.basename(entry).startswith("libgvmshim.so"):
            return entry
    return None
