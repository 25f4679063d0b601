"""What slime asks torch_memory_saver's package for: the library to put on
a child's LD_PRELOAD, which under gvmshim is gvmshim itself."""
import os

from torch_memory_saver import _HERE, gvmshim


def get_binary_path_from_package(stem="torch_memory_saver_hook_mode_preload"):
    """The libgvmshim.so this process runs under; else the file named
    `stem`.abi3.so beside this package (installed as a link to gvmshim)."""
    lib = gvmshim.library_path()
    if lib:
        return lib
    path = os.path.join(_HERE, stem + ".abi3.so")
    if os.path.exists(path):
        return path
    raise FileNotFoundError("no libgvmshim.so in this process (run it under gvmrun) and no %s" % path)
