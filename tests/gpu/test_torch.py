#!/usr/bin/env python3
"""PyTorch under gvmshim: a small deterministic training loop gives the
same losses natively and under the shim; under the shim gvmshim.query
knows a weight tensor's memory and the stats show served allocations.

The parent runs without the shim (it never imports torch); each run is a
child process. Exit 77 without torch or a GPU. The policy cases (spill,
peer, rules, pause/resume, cached blocks) are in test_torch_policy.py.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402


# ---- children ------------------------------------------------------------------


torch_or_skip = gt.torch_or_skip


def child_train(args):
    torch = torch_or_skip()
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)
    x = torch.randn(512, 256)
    y = torch.randint(0, 10, (512,))
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    dev = torch.device("cuda", 0)
    model = model.to(dev)
    x, y = x.to(dev), y.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(args.get("steps", 20)):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()).hex())
    torch.cuda.synchronize()
    res = {"losses": losses, "device": torch.cuda.get_device_name(0)}
    if args.get("shim"):
        import gvmshim

        if not gvmshim.available():
            raise RuntimeError("LD_PRELOAD is set but gvmshim's API is not in the process")
        w = model[2].weight
        ptr, nbytes = w.data_ptr(), w.numel() * w.element_size()
        res["weight_ptr"] = ptr
        res["weight_bytes"] = nbytes
        res["query"] = gt.gvm_info_dict(gvmshim.query(ptr))
        res["query_last"] = gt.gvm_info_dict(gvmshim.query(ptr + nbytes - 1))
        try:
            gvmshim.query(id(res))   # a host address is not gvmshim's
            res["host_query"] = "known"
        except gvmshim.GvmError as e:
            res["host_query"] = e.status
    return res


# ---- the parent ----------------------------------------------------------------

runs = {}


def get(name, **kw):
    """Each child runs once; later cases reuse its result (or its failure)."""
    if name not in runs:
        try:
            runs[name] = gt.run_child(__file__, "train", **kw)
        except (gt.Skip, gt.Failure) as e:
            runs[name] = e
    if isinstance(runs[name], Exception):
        raise runs[name]
    return runs[name]


def case_same_losses():
    native = get("native", args={"shim": False}, shim=False)
    shim = get("shim", args={"shim": True}, shim=True)
    worst = gt.compare_series(native.result["losses"], shim.result["losses"], 1e-6, "losses")
    first, last = float.fromhex(native.result["losses"][0]), float.fromhex(native.result["losses"][-1])
    print("  device %s; loss %.6f -> %.6f; worst relative difference %.3g%s"
          % (native.result["device"], first, last, worst, " (bitwise equal)" if worst == 0 else ""))
    gt.expect(last < first, "the loss did not go down (%.6f -> %.6f): the loop is not training" % (first, last))


def case_query_weight():
    shim = get("shim", args={"shim": True}, shim=True)
    r = shim.result
    q, ql = r["query"], r["query_last"]
    ptr, nbytes = r["weight_ptr"], r["weight_bytes"]
    gt.expect(q["base"] <= ptr and ptr + nbytes <= q["base"] + q["size"],
              "weight [%#x, +%d) is outside the allocation gvm_query reports: base %#x size %d"
              % (ptr, nbytes, q["base"], q["size"]))
    gt.expect(ql["base"] == q["base"], "the weight's last byte is in another allocation (%#x vs %#x)"
              % (ql["base"], q["base"]))
    gt.expect(q["device"] == 0 and q["location"] == 0, "device %d location %d, want 0/0"
              % (q["device"], q["location"]))
    gt.expect(r["host_query"] == -1, "gvm_query of a host address: %r, want -1 (unknown pointer)"
              % (r["host_query"],))
    print("  weight at %#x in an allocation of %d bytes (packed %d, %d piece(s))"
          % (ptr, q["size"], q["packed"], q["pieces"]))


def case_stats():
    st = get("shim", args={"shim": True}, shim=True).stats
    calls = st.get("driver_calls", {})
    print("  allocations_total %d, live %d, passthrough_calls %d, cuMemAlloc_v2 %d"
          % (st["allocations_total"], st["allocations_live"], st["passthrough_calls"],
             calls.get("cuMemAlloc_v2", 0)))
    gt.expect(st["allocations_total"] > 0, "no allocation was served by gvmshim")
    gt.expect(calls.get("cuMemAlloc_v2", 0) > 0, "PyTorch's cudaMalloc never reached cuMemAlloc_v2's hook")
    gt.expect(st["alloc_failures"] == 0, "%d allocations failed" % st["alloc_failures"])
    gt.expect(calls.get("cuMemAlloc_v2", 0) + calls.get("cuMemAllocPitch_v2", 0) == st["allocations_total"],
              "not every cudaMalloc was served: %d calls, %d served"
              % (calls.get("cuMemAlloc_v2", 0), st["allocations_total"]))


def main():
    return gt.suite_main("torch", "torch", {"train": child_train},
                         [("same_losses_native_vs_shim", case_same_losses), ("query_weight", case_query_weight),
                          ("stats_allocations", case_stats)])


if __name__ == "__main__":
    sys.exit(main())
