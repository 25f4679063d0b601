#!/usr/bin/env python3
"""PyTorch's cudaMallocAsync backend (PYTORCH_CUDA_ALLOC_CONF=
backend:cudaMallocAsync) natively and under the shim: PyTorch reads the
device's default pool (cudaMemPoolGetAttribute) for memory_reserved(),
max_memory_reserved() and memory_stats(); its allocations go through
cudaMallocAsync, which gvmshim serves. A short MLP + Adam training loop
records, at each step, memory_reserved(), memory_allocated(),
max_memory_reserved() and the pool's used bytes from memory_stats(): every
figure must equal the native run's, and the losses must be identical bit
for bit. Then empty_cache() (a synchronize and a trim of the pool to
nothing) and reset_peak_memory_stats() (the highs set to 0).

The parent runs without the shim (it never imports torch); each run is a
child process. Exit 77 without torch or a GPU.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402

ENV = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}


def figures(torch, step, loss=None):
    st = torch.cuda.memory_stats(0)
    return {"step": step, "reserved": int(torch.cuda.memory_reserved(0)),
            "allocated": int(torch.cuda.memory_allocated(0)),
            "max_reserved": int(torch.cuda.max_memory_reserved(0)),
            "max_allocated": int(torch.cuda.max_memory_allocated(0)),
            "pool_reserved": int(st.get("reserved_bytes.all.current", -1)),
            "loss": loss}


def child_train(args):
    torch = gt.torch_or_skip()
    if torch.cuda.get_allocator_backend() != "cudaMallocAsync":
        gt.child_skip("no cudaMallocAsync backend in this torch (%s)" % torch.cuda.get_allocator_backend())
    dev = torch.device("cuda", 0)
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator(device=dev)
    g.manual_seed(42)
    x = torch.randn(256, 512, device=dev, generator=g)
    y = torch.randint(0, 10, (256,), device=dev, generator=g)
    torch.cuda.synchronize()
    rows = [figures(torch, "start")]
    for step in range(12):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        rows.append(figures(torch, "step %d" % step, float(loss.item()).hex()))
    del loss
    torch.cuda.synchronize()
    rows.append(figures(torch, "after the loop"))
    del model, opt
    torch.cuda.empty_cache()
    rows.append(figures(torch, "empty_cache"))
    torch.cuda.reset_peak_memory_stats(0)
    rows.append(figures(torch, "reset_peak_memory_stats"))
    return {"rows": rows}


def run(shim):
    return gt.once("train-%s" % shim, lambda: gt.run_child(
        __file__, "train", {}, shim=shim, env=ENV, label="train (%s)" % ("shim" if shim else "native")))


def case_same_figures():
    ref, got = run(False).result["rows"], run(True).result["rows"]
    for r in ref:
        print("  %-24s reserved %10d allocated %10d max_reserved %10d"
              % (r["step"], r["reserved"], r["allocated"], r["max_reserved"]))
    for a, b in zip(ref, got):
        gt.expect(a == b, "%s: native %s, under the shim %s" % (a["step"], a, b))
    gt.expect(len(ref) == len(got), "%d rows natively, %d under the shim" % (len(ref), len(got)))
    losses = [float.fromhex(r["loss"]) for r in ref if r["loss"]]
    gt.expect(losses[-1] < losses[0], "the loss did not fall: %s" % losses)


def case_served_by_shim():
    st = run(True).stats
    calls = st.get("driver_calls", {})
    print("  allocations_total %d, cuMemAllocAsync %d" % (st["allocations_total"], calls.get("cuMemAllocAsync", 0)))
    gt.expect(calls.get("cuMemAllocAsync", 0) > 0, "PyTorch made no cudaMallocAsync call")
    gt.expect(st["allocations_total"] > 0, "gvmshim served no allocation")
    gt.expect(st["alloc_failures"] == 0, "%d allocations failed" % st["alloc_failures"])


def main():
    return gt.suite_main("torch-async-pool", "torch", {"train": child_train},
                         [("same_figures_native_vs_shim", case_same_figures),
                          ("served_by_shim", case_served_by_shim)])


if __name__ == "__main__":
    sys.exit(main())
