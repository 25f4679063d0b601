#!/bin/sh
# Build and run the smoke check natively and under the shim (device machine).
set -u
cd "$(dirname "$0")/../.."
meson setup build-smoke -Dtests=false >/dev/null && ninja -C build-smoke >/dev/null || exit 1
nvcc -arch=native -O2 -o /tmp/smoke scripts/probe/smoke.cu -ldl || exit 1
echo "== native"; /tmp/smoke
echo "== shim"; GVM_STATS=1 LD_PRELOAD=$PWD/build-smoke/preload/libgvmshim.so /tmp/smoke
echo "== torch"
GVM_STATS=/tmp/st.json LD_PRELOAD=$PWD/build-smoke/preload/libgvmshim.so python3 -c '
import torch
x = torch.randn(2000, 2000, device="cuda"); y = x @ x; print("torch", float(y.sum()) != 0, torch.cuda.memory_allocated())
import sys; sys.path.insert(0, "python"); import gvmshim; print(gvmshim.query(x.data_ptr()).as_dict())
'
python3 -c 'import json; d=json.load(open("/tmp/st.json")); print({k: d[k] for k in ("allocations_total","passthrough_calls","cache_hits")}, d["driver_calls"])'
echo "== cupy"
GVM_STATS=1 LD_PRELOAD=$PWD/build-smoke/preload/libgvmshim.so python3 -c '
import cupy as cp
a = cp.arange(10**7, dtype=cp.float32); print("cupy", float(a.sum()), float((a*2).sum()))
' 2>&1 | grep -E "cupy|allocations_total|passthrough"
