"""NVML from inside a gpu-suite child: the device memory this process
holds, as `nvidia-smi` shows it (shared by test_torch_limit.py and the
gvmctl tests). pynvml where installed, else ctypes on libnvidia-ml.so.1.
"""
import ctypes
import os
import subprocess
import threading
import time

import gvmtest as gt


class _ProcessInfo(ctypes.Structure):
    # nvmlProcessInfo_v2_t, what the _v2 and _v3 process queries fill
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class Nvml:
    """used(i): bytes NVML reports for this process on CUDA device i, or
    None when the process is not listed there."""

    def __init__(self, ndev):
        self.pid = os.getpid()
        bus = [self._bus_id(i) for i in range(ndev)]
        try:
            import pynvml
            pynvml.nvmlInit()
            self._py = pynvml
            self._handles = [pynvml.nvmlDeviceGetHandleByPciBusId(b) for b in bus]
            return
        except ImportError:
            self._py = None
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        self._check(lib.nvmlInit_v2())
        self._procs = getattr(lib, "nvmlDeviceGetComputeRunningProcesses_v3", None) or \
            lib.nvmlDeviceGetComputeRunningProcesses_v2
        self._handles = []
        for b in bus:
            h = ctypes.c_void_p()
            self._check(lib.nvmlDeviceGetHandleByPciBusId_v2(b, ctypes.byref(h)))
            self._handles.append(h)
        self._buf = (_ProcessInfo * 1024)()

    @staticmethod
    def _bus_id(dev):
        # CUDA and NVML number devices differently: match them by PCI bus id.
        cuda = ctypes.CDLL("libcuda.so.1")
        buf = ctypes.create_string_buffer(32)
        if cuda.cuDeviceGetPCIBusId(buf, 32, dev) != 0:
            raise RuntimeError("cuDeviceGetPCIBusId(%d) failed" % dev)
        return buf.value

    @staticmethod
    def _check(rc):
        if rc != 0:
            raise RuntimeError("NVML error %d" % rc)

    def used(self, i):
        if self._py:
            procs = [(p.pid, p.usedGpuMemory) for p in self._py.nvmlDeviceGetComputeRunningProcesses(self._handles[i])]
        else:
            n = ctypes.c_uint(len(self._buf))
            self._check(self._procs(self._handles[i], ctypes.byref(n), self._buf))
            procs = [(self._buf[k].pid, self._buf[k].usedGpuMemory) for k in range(n.value)]
        for pid, used in procs:
            if pid == self.pid and used is not None and used < (1 << 63):
                return int(used)
        return None


class Sampler(threading.Thread):
    """Peak of Nvml.used over the devices, every ~2 ms until stopped."""

    def __init__(self, nvml, ndev):
        super().__init__(daemon=True)
        self.nvml, self.ndev = nvml, ndev
        self.peak = [0] * ndev
        self.seen = False
        self.samples = 0
        self._stop_event = threading.Event()

    def run(self):
        while not self._stop_event.is_set():
            self.sample()
            time.sleep(0.002)

    def sample(self):
        for i in range(self.ndev):
            u = self.nvml.used(i)
            if u is not None:
                self.seen = True
                self.peak[i] = max(self.peak[i], u)
        self.samples += 1

    def stop(self):
        self._stop_event.set()
        self.join()
        self.sample()


def start_sampler(torch):
    ndev = min(torch.cuda.device_count(), 2)
    try:
        nvml = Nvml(ndev)
    except (OSError, RuntimeError, AttributeError) as e:
        gt.child_skip("no NVML to sample (%s)" % e)
    s = Sampler(nvml, ndev)
    s.sample()
    if not s.seen:
        gt.child_skip("NVML does not list this process (pid %d): another pid namespace?" % os.getpid())
    s.start()
    return s


def try_nvml(ndev=1):
    """An Nvml for this process, or None (with the reason) when NVML cannot
    be loaded or does not list this process (another pid namespace)."""
    try:
        nvml = Nvml(ndev)
    except (OSError, RuntimeError, AttributeError) as e:
        return None, "no NVML (%s)" % e
    if nvml.used(0) is None:
        return None, "NVML does not list this process (pid %d): another pid namespace?" % os.getpid()
    return nvml, None


def smi_used(pid):
    """What `nvidia-smi --query-compute-apps` reports process `pid` uses, in
    bytes over every GPU, or None when nvidia-smi is missing or does not list
    it. The parent's view: it loads neither CUDA nor NVML itself."""
    try:
        p = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    total, seen = 0, False
    for line in p.stdout.decode("utf-8", "replace").splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid) and parts[1].isdigit():
            total += int(parts[1]) * gt.MiB
            seen = True
    return total if seen else None
