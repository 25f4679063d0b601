#!/usr/bin/env python3
"""CUDA graphs in PyTorch under gvmshim: capture and replay give the eager
outputs, natively and under the shim, and the same outputs in both.

  graph_capture     torch.cuda.graph of a small MLP's forward: replays of
                    new inputs equal eager; under the shim also after the
                    weights moved to host memory and back
  graph_spill       the same with GVM_DEVICE_LIMIT and GVM_SPILL=host, the
                    device filled to the limit first, so the allocations of
                    the capture (the graph's private pool) spill while it
                    is open
  graph_after_eviction
                    a graph replayed after a large allocation sent its
                    weights to host, under GVM_SPILL_HOST_MAP eager and
                    lazy (spilled memory unmapped: the graph's launch maps
                    it): outputs equal eager
  compile_reduce_overhead
                    torch.compile(mode="reduce-overhead") of a small model
                    (CUDA graphs under the hood): outputs equal eager

The parent runs without the shim; each run is a child process. Exit 77
without torch or a GPU; compile_reduce_overhead skips where torch.compile
cannot build (no triton).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402

MiB = gt.MiB
LIMIT = "0:2G"


def mlp(torch):
    import torch.nn as nn
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 10))


def hexes(t, n=64):
    return [float(v).hex() for v in t.flatten()[:n].tolist()]


def warm_up(torch, model, static_x):
    """PyTorch's recipe before a capture: a few iterations on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)


def child_graph(args):
    torch = gt.torch_or_skip()
    dev = torch.device("cuda", 0)
    filler = None
    model = mlp(torch).to(dev).eval()
    gen = torch.Generator().manual_seed(1)
    inputs = [torch.randn(128, 256, generator=gen).to(dev) for _ in range(4)]
    with torch.no_grad():
        eager = [model(x).clone() for x in inputs]
        static_x = torch.zeros(128, 256, device=dev)
        warm_up(torch, model, static_x)
        if args.get("fill_to_limit"):
            # Under a device limit cuMemGetInfo tells the room left: take it
            # all, so the graph's private pool must spill during the capture.
            torch.cuda.synchronize()
            free, _ = torch.cuda.mem_get_info()
            filler = torch.empty(max(free - 2 * MiB, MiB), dtype=torch.uint8, device=dev)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = model(static_x)

        def replay_all():
            outs = []
            for x in inputs:
                static_x.copy_(x)
                g.replay()
                outs.append(static_y.clone())
            torch.cuda.synchronize()
            return outs

        outs = replay_all()
        res = {"same": all(torch.equal(a, b) for a, b in zip(eager, outs)),
               "close": all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(eager, outs)),
               "out": hexes(outs[-1]), "eager": hexes(eager[-1])}
        if args.get("shim"):
            import gvmshim
            if not gvmshim.available():
                raise RuntimeError("LD_PRELOAD is set but gvmshim's API is not in the process")
            # The graph binds addresses: weights moved away and back replay the same.
            ptrs = [p.data_ptr() for p in model.parameters()]
            for p in ptrs:
                gvmshim.migrate(p, gvmshim.HOST)
            moved = replay_all()
            res["same_after_move"] = all(torch.equal(a, b) for a, b in zip(outs, moved))
            for p in ptrs:
                gvmshim.migrate(p, 0)
            back = replay_all()
            res["same_after_return"] = all(torch.equal(a, b) for a, b in zip(outs, back))
    del filler
    return res


def child_graph_evict(args):
    """A graph captured with its weights on the device, replayed after a
    large allocation sent them (and the graph's pool) out: the replay
    reaches them only through the graph, which the launch scan does not
    see into."""
    torch = gt.torch_or_skip()
    import torch.nn as nn
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, 16)).to(dev).eval()   # 16 MiB weights: allocations of their own
    gen = torch.Generator().manual_seed(3)
    inputs = [torch.randn(256, 2048, generator=gen).to(dev) for _ in range(3)]
    with torch.no_grad():
        eager = [model(x).clone() for x in inputs]
        static_x = torch.zeros(256, 2048, device=dev)
        warm_up(torch, model, static_x)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = model(static_x)
        torch.cuda.synchronize()
        hog_sum = 1024.0
        if args.get("hog"):   # under the shim's limit: more than the room left
            free, _ = torch.cuda.mem_get_info()
            hog = torch.ones(free // 4 + 64 * MiB // 4, dtype=torch.float32, device=dev)
            hog_sum = float(hog[:1024].sum())
        outs = []
        for x in inputs:
            static_x.copy_(x)
            g.replay()
            outs.append(static_y.clone())
        torch.cuda.synchronize()
    return {"same": all(torch.equal(a, b) for a, b in zip(eager, outs)),
            "close": all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(eager, outs)),
            "hog": hog_sum, "out": hexes(outs[-1])}


def child_compile(args):
    torch = gt.torch_or_skip()
    dev = torch.device("cuda", 0)
    model = mlp(torch).to(dev).eval()
    gen = torch.Generator().manual_seed(2)
    inputs = [torch.randn(128, 256, generator=gen).to(dev) for _ in range(5)]
    with torch.no_grad():
        eager = [model(x).clone() for x in inputs]
        try:
            compiled = torch.compile(model, mode="reduce-overhead")
            outs = [compiled(x).clone() for x in inputs]
        except Exception as e:  # no triton, no compiler: nothing to test here
            text = "%s: %s" % (type(e).__name__, e)
            if any(w in text.lower() for w in ("triton", "compiler", "inductor", "backend")):
                gt.child_skip("torch.compile cannot build here (%s)" % text.splitlines()[0][:200])
            raise
        torch.cuda.synchronize()
    worst = max(float((a - b).abs().max()) for a, b in zip(eager, outs))
    return {"close": all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(eager, outs)),
            "worst": worst, "out": hexes(outs[-1])}


HANDLERS = {"graph": child_graph, "graph_evict": child_graph_evict, "compile": child_compile}


def check_graph(r, label):
    gt.expect(r["close"], "%s: graph replays differ from eager" % label)
    if not r["same"]:
        print("  %s: replays equal eager within 1e-5, not bitwise" % label)


def case_graph_capture():
    native = gt.run_child(__file__, "graph", {"shim": False}, shim=False)
    shim = gt.run_child(__file__, "graph", {"shim": True}, shim=True)
    check_graph(native.result, "native")
    check_graph(shim.result, "shim")
    gt.expect(shim.result["same_after_move"], "replays after the weights moved to host differ")
    gt.expect(shim.result["same_after_return"], "replays after the weights came back differ")
    gt.compare_series(native.result["out"], shim.result["out"], 1e-6, "graph outputs native vs shim")
    st = shim.stats
    gt.expect(st["alloc_failures"] == 0, "%d allocations failed under the shim" % st["alloc_failures"])
    gt.expect(st["allocations_total"] > 0, "no allocation was served by gvmshim")


def case_graph_spill():
    native = gt.run_child(__file__, "graph", {"shim": False}, shim=False)
    shim = gt.run_child(__file__, "graph", {"shim": True, "fill_to_limit": True}, shim=True,
                        env={"GVM_DEVICE_LIMIT": LIMIT, "GVM_SPILL": "host"})
    check_graph(shim.result, "shim, spilling")
    gt.compare_series(native.result["out"], shim.result["out"], 1e-6, "graph outputs native vs shim (spill)")
    st = shim.stats
    print("  stats: spills %d, spilled_bytes %.1f MiB, migrations_failed %d"
          % (st["spills"], st["spilled_bytes"] / MiB, st["migrations_failed"]))
    gt.expect(st["spills"] > 0, "nothing spilled with the device filled to its limit")


def case_graph_after_eviction():
    native = gt.run_child(__file__, "graph_evict", {}, shim=False)
    check_graph(native.result, "native")
    for mode in ("eager", "lazy"):
        shim = gt.run_child(__file__, "graph_evict", {"hog": True}, shim=True,
                            label="graph after eviction (%s)" % mode,
                            env={"GVM_DEVICE_LIMIT": LIMIT, "GVM_SPILL": "host", "GVM_SPILL_HOST_MAP": mode})
        check_graph(shim.result, "shim, spill_host_map=" + mode)
        gt.compare_series(native.result["out"], shim.result["out"], 1e-6,
                          "graph outputs after eviction, native vs shim (%s)" % mode)
        gt.expect(shim.result["hog"] == 1024.0, "the large allocation lost its contents (%s)" % mode)
        st = shim.stats
        print("  %s: spills %d, promotions %d, migrations_failed %d"
              % (mode, st["spills"], st["promotions"], st["migrations_failed"]))
        gt.expect(st["spills"] > 0, "nothing left the device for the large allocation (%s)" % mode)


def case_compile():
    native = gt.run_child(__file__, "compile", {}, shim=False, timeout=500)
    shim = gt.run_child(__file__, "compile", {}, shim=True, timeout=500)
    gt.expect(native.result["close"], "native: compiled outputs differ from eager (worst %g)" % native.result["worst"])
    gt.expect(shim.result["close"], "shim: compiled outputs differ from eager (worst %g)" % shim.result["worst"])
    gt.compare_series(native.result["out"], shim.result["out"], 1e-6, "compiled outputs native vs shim")


def main():
    return gt.suite_main("torch graphs", "torch", HANDLERS,
                         [("graph_capture", case_graph_capture), ("graph_spill", case_graph_spill),
                          ("graph_after_eviction", case_graph_after_eviction),
                          ("compile_reduce_overhead", case_compile)])


if __name__ == "__main__":
    sys.exit(main())
