#!/usr/bin/env python3
"""gvmshim's policies seen from PyTorch. Each job is a child process (the
parent never imports torch), natively or under the shim with the GVM_*
settings of the case:

  spill_host       a training loop whose live tensors need ~1.5x
                   GVM_DEVICE_LIMIT completes under GVM_SPILL=host with the
                   same losses as natively; stats show spills
  spill_peer       (2 GPUs) with GVM_SPILL=peer,host the same job spills to
                   GPU 1, not to host
  threshold_rule   [rule] size = 2G- / place = host: a 2.5 GiB tensor lives
                   in host memory and kernels compute on it correctly
  pause_resume     a tagged model in its own MemPool: pause gives its memory
                   back (mem_get_info), resume restores identical outputs;
                   with discard the parameters come back zeroed
  resume_at_limit  the model paused, a buffer filling a 2G limit made
                   meanwhile (GVM_SPILL=host): the resume makes room, the
                   outputs and the buffer come back intact, the limit holds
  cached_first     the caching allocator's cached (freed) segment is what
                   leaves the GPU first; a job that fits never spills
  lazy_two_streams with GVM_SPILL_HOST_MAP=lazy, a second stream rewrites
                   half the weights in place while the first reads the
                   other half, then all (ordered by an event, as PyTorch
                   programs do): the sums equal the native run's bit for
                   bit, so no swap copied a weight out before the other
                   stream's last write to it had finished (core/usemark.h)

Exit 77 without torch or a GPU.
"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402

MiB, GiB = gt.MiB, gt.GiB
LIMIT = "2G"
LIMIT_BYTES = 2 * GiB


# ---- children ------------------------------------------------------------------


torch_or_skip = gt.torch_or_skip


def need_free(torch, nbytes):
    free, _ = torch.cuda.mem_get_info(0)
    if free < nbytes:
        gt.child_skip("not enough GPU memory: %d MiB free, %d MiB needed" % (free // MiB, nbytes // MiB))


def locations_of(tensors):
    """Bytes of the given tensors' allocations by gvmshim location."""
    import gvmshim

    by = {}
    seen = set()
    for t in tensors:
        info = gvmshim.query(t.data_ptr())
        if info.base in seen:
            continue
        seen.add(info.base)
        key = str(info.location)
        by[key] = by.get(key, 0) + info.size
    return by


def child_spill_train(args):
    """Explicit weight matrices, tanh MLP, manual SGD: every weight and its
    gradient is touched every step."""
    torch = torch_or_skip()
    layers, d, batch, steps = args["layers"], args["dim"], args["batch"], args["steps"]
    if args.get("need_free"):
        need_free(torch, args["need_free"])
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev)
    g.manual_seed(1234)
    ws = [(torch.randn(d, d, device=dev, generator=g) / d ** 0.5).requires_grad_() for _ in range(layers)]
    x = torch.randn(batch, d, device=dev, generator=g)
    target = torch.randn(batch, d, device=dev, generator=g)
    losses, times = [], []
    for _ in range(steps):
        t0 = time.time()
        h = x
        for w in ws:
            h = torch.tanh(h @ w)
        loss = ((h - target) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for w in ws:
                w.sub_(args["lr"] * w.grad)
                w.grad = None
        losses.append(float(loss.item()).hex())
        times.append(time.time() - t0)
    torch.cuda.synchronize()
    res = {
        "losses": losses,
        "step_s": times,
        "max_allocated": torch.cuda.max_memory_allocated(0),
        "device_count": torch.cuda.device_count(),
        "peer": bool(torch.cuda.device_count() >= 2 and torch.cuda.can_device_access_peer(0, 1)
                     and torch.cuda.can_device_access_peer(1, 0)),
        "device": torch.cuda.get_device_name(0),
    }
    if args.get("shim"):
        res["weights_at"] = locations_of(ws)
    return res


def child_threshold(args):
    torch = torch_or_skip()
    import gvmshim

    need_free(torch, 2 * GiB)
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev)
    g.manual_seed(7)
    period = 1 << 20                      # elements of the small reference
    reps = (5 * GiB // 2) // (4 * period)  # 2.5 GiB of float32
    base = torch.randint(0, 16, (period,), device=dev, generator=g).float()
    t = base.repeat(reps)
    info = gvmshim.query(t.data_ptr())
    on_device = torch.empty(GiB, dtype=torch.uint8, device=dev)
    dev_info = gvmshim.query(on_device.data_ptr())
    del on_device
    doubled = t * 2
    doubled_info = gvmshim.query(doubled.data_ptr())
    total = float(doubled.sum(dtype=torch.float64).item())
    del doubled
    ref_total = float(reps * (base.double() * 2).sum().item())
    w = torch.randint(-2, 3, (1024, 16), device=dev, generator=g).float()
    out = t.view(-1, 1024) @ w
    ref = base.view(1024, 1024) @ w
    ref_cpu = base.cpu().view(1024, 1024) @ w.cpu()
    mm_equal = bool(torch.equal(out.view(reps, 1024, 16), ref.unsqueeze(0).expand(reps, 1024, 16)))
    torch.cuda.synchronize()
    return {
        "tensor_bytes": t.numel() * 4,
        "info": gt.gvm_info_dict(info),
        "doubled_location": doubled_info.location,
        "device_tensor_location": dev_info.location,
        "sum": total,
        "ref_sum": ref_total,
        "mm_equal": mm_equal,
        "ref_cpu_equal": bool(torch.equal(ref.cpu(), ref_cpu)),
    }


def tagged_model(torch, width, relu, free_needed, seed):
    """Four Linear(width, width) layers allocated under gvmshim's tag "model"
    from their own torch.cuda.MemPool (so their segments hold nothing else),
    and an input for them: (model, x)."""
    import torch.nn as nn
    import gvmshim

    if not hasattr(torch.cuda, "MemPool") or not hasattr(torch.cuda, "use_mem_pool"):
        gt.child_skip("this torch (%s) has no torch.cuda.MemPool/use_mem_pool" % torch.__version__)
    need_free(torch, free_needed)
    dev = torch.device("cuda", 0)
    torch.manual_seed(seed)
    x = torch.randn(64, width, device=dev)
    pool = torch.cuda.MemPool()
    with gvmshim.tag("model"), torch.cuda.use_mem_pool(pool):
        layers = [nn.Linear(width, width, device=dev) for _ in range(4)]
        model = nn.Sequential(*[m for lin in layers for m in ((lin, nn.ReLU()) if relu else (lin,))])
    model._gvm_pool = pool   # the pool lives as long as the model
    return model, x


def child_pause(args):
    torch = torch_or_skip()
    import gvmshim

    model, x = tagged_model(torch, 4096, True, 2 * GiB, 3)
    params = list(model.parameters())
    model_bytes = sum(p.numel() * p.element_size() for p in params)
    with torch.no_grad():
        y0 = model(x).clone()
    torch.cuda.synchronize()
    res = {"model_bytes": model_bytes}

    f0 = torch.cuda.mem_get_info(0)[0]
    gvmshim.pause("model")
    f1 = torch.cuda.mem_get_info(0)[0]
    res["paused_info"] = gt.gvm_info_dict(gvmshim.query(params[0].data_ptr()))
    gvmshim.resume("model")
    res["resumed_info"] = gt.gvm_info_dict(gvmshim.query(params[0].data_ptr()))
    with torch.no_grad():
        y1 = model(x)
    res["keep_equal"] = bool(torch.equal(y0, y1))
    res["free_gain_keep"] = f1 - f0

    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    del y1
    torch.cuda.synchronize()
    f2 = torch.cuda.mem_get_info(0)[0]
    gvmshim.pause("model", discard=True)
    f3 = torch.cuda.mem_get_info(0)[0]
    res["discard_info"] = gt.gvm_info_dict(gvmshim.query(params[0].data_ptr()))
    gvmshim.resume("model")
    res["free_gain_discard"] = f3 - f2
    res["zeros_after_discard"] = all(int(p.count_nonzero().item()) == 0 for p in params)
    model.load_state_dict(state)
    with torch.no_grad():
        y2 = model(x)
    res["reload_equal"] = bool(torch.equal(y0, y2))
    torch.cuda.synchronize()
    return res


def child_resume_at_limit(args):
    """A tagged model paused, a buffer filling the limit made meanwhile, then
    the model resumed (GVM_DEVICE_LIMIT and GVM_SPILL set by the parent):
    the resume must make room as an allocation would."""
    torch = torch_or_skip()
    import gvmshim

    model, x = tagged_model(torch, 8192, False, 4 * GiB, 5)   # 1 GiB of weights
    dev = x.device
    with torch.no_grad():
        y0 = model(x).clone()
    torch.cuda.synchronize()
    gvmshim.pause("model")
    filler = torch.full((args["filler_mib"] * MiB // 4,), 7.0, device=dev)
    filler.add_(1)
    torch.cuda.synchronize()
    res = {"resume_error": None}
    try:
        gvmshim.resume("model")
    except gvmshim.GvmError as e:
        res["resume_error"] = str(e)
    if res["resume_error"] is None:
        with torch.no_grad():
            y1 = model(x)
        res["model_equal"] = bool(torch.equal(y0, y1))
    res["filler_ok"] = bool((filler == 8.0).all().item())
    torch.cuda.synchronize()
    return res


def child_cached(args):
    """A kept and used, B allocated then freed (its segment stays cached by
    PyTorch), A used again, then C that needs B's room."""
    torch = torch_or_skip()
    import gvmshim

    dev = torch.device("cuda", 0)
    a_mib, b_mib, c_mib = args["a"], args["b"], args["c"]
    a = torch.ones(a_mib * MiB // 4, device=dev)
    b = torch.ones(b_mib * MiB // 4, device=dev)
    b.add_(1)
    b_ptr = b.data_ptr()
    del b
    a.add_(1)
    torch.cuda.synchronize()
    c = torch.ones(c_mib * MiB // 4, device=dev)
    c.add_(2)
    a.add_(1)
    torch.cuda.synchronize()
    res = {
        "a": gvmshim.query(a.data_ptr()).location,
        "b_segment": gvmshim.query(b_ptr).location,
        "c": gvmshim.query(c.data_ptr()).location,
        "reserved": torch.cuda.memory_reserved(0),
    }
    res["a_ok"] = float(a.min().item()) == 3.0 and float(a.max().item()) == 3.0
    res["c_ok"] = float(c.min().item()) == 3.0 and float(c.max().item()) == 3.0
    return res


def child_two_streams(args):
    torch = torch_or_skip()
    n, rows, steps = args["weights"], args["rows"], args["steps"]
    need_free(torch, n * rows * 8192 * 4 + 512 * MiB)
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev)
    g.manual_seed(77)
    ws = [torch.rand(rows, 8192, device=dev, generator=g) for _ in range(n)]
    x = torch.rand(8192, 16, device=dev, generator=g)
    side = torch.cuda.Stream()
    sums = []
    for _ in range(steps):
        side.wait_stream(torch.cuda.current_stream())
        done = torch.cuda.Event()
        with torch.cuda.stream(side):
            for w in ws[1::2]:
                w.mul_(0.5).add_(0.25).mul_(1.5).sub_(0.125)
            done.record(side)
        acc = torch.zeros((), device=dev)
        for w in ws[0::2]:
            acc += (w @ x).sum()
        torch.cuda.current_stream().wait_event(done)
        for w in ws:
            acc += (w @ x).sum()
        sums.append(float(acc.item()).hex())
    torch.cuda.synchronize()
    return {"sums": sums}


HANDLERS = {"spill_train": child_spill_train, "two_streams": child_two_streams, "threshold": child_threshold, "pause": child_pause, "resume_at_limit": child_resume_at_limit,
            "cached": child_cached}

# ---- the parent ----------------------------------------------------------------

SPILL_ARGS = {"layers": 6, "dim": 8192, "batch": 256, "steps": 8, "lr": 0.1}


def native_spill_ref():
    return gt.once("native", lambda: gt.run_child(
        __file__, "spill_train", dict(SPILL_ARGS, need_free=5 * GiB), shim=False))


def check_loop(ref, got, label):
    worst = gt.compare_series(ref.result["losses"], got.result["losses"], 1e-6, "losses")
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    print("  %s: losses equal to native (worst relative difference %.3g%s); median step %.1f ms vs %.1f ms natively"
          % (label, worst, ", bitwise" if worst == 0 else "", 1e3 * med(got.result["step_s"][2:]),
             1e3 * med(ref.result["step_s"][2:])))


def case_spill_host():
    ref = native_spill_ref()
    need = ref.result["max_allocated"]
    print("  the job needs %.2f GiB natively (max_memory_allocated), %.2fx the %s limit"
          % (need / GiB, need / LIMIT_BYTES, LIMIT))
    gt.expect(need >= 1.35 * LIMIT_BYTES, "the job needs only %.2f GiB: not enough to test spilling" % (need / GiB))
    got = gt.run_child(__file__, "spill_train", dict(SPILL_ARGS, shim=True), shim=True,
                       env={"GVM_DEVICE_LIMIT": LIMIT, "GVM_SPILL": "host"})
    check_loop(ref, got, "GVM_SPILL=host")
    st = got.stats
    print("  stats: spills %d (%.2f GiB), promotions %d, d2h %d, h2d %d, bytes_migrated %.2f GiB, "
          "launches_scanned %d; weights at %s"
          % (st["spills"], st["spilled_bytes"] / GiB, st["promotions"], st["migrations_d2h"],
             st["migrations_h2d"], st["bytes_migrated"] / GiB, st["launches_scanned"], got.result["weights_at"]))
    gt.expect(st["spills"] > 0, "no spill under a %s limit with a %.2f GiB job" % (LIMIT, need / GiB))
    gt.expect(st["migrations_failed"] == 0, "%d migrations failed" % st["migrations_failed"])
    gt.expect(st["alloc_failures"] == 0, "%d allocations failed" % st["alloc_failures"])


def case_spill_peer():
    ref = native_spill_ref()
    if ref.result["device_count"] < 2:
        raise gt.Skip("needs 2 GPUs (have %d)" % ref.result["device_count"])
    if not ref.result["peer"]:
        raise gt.Skip("GPUs 0 and 1 have no peer access")
    got = gt.run_child(__file__, "spill_train", dict(SPILL_ARGS, shim=True), shim=True,
                       env={"GVM_DEVICE_LIMIT": "0:" + LIMIT, "GVM_SPILL": "peer,host"})
    check_loop(ref, got, "GVM_SPILL=peer,host")
    st = got.stats
    res = st.get("resident_bytes", {})
    print("  stats: spills %d, d2d %d, d2h %d, resident at exit %s; weights at %s"
          % (st["spills"], st["migrations_d2d"], st["migrations_d2h"], res, got.result["weights_at"]))
    gt.expect(st["spills"] > 0, "no spill")
    gt.expect(st["migrations_d2d"] > 0, "nothing moved to the peer GPU")
    gt.expect(st["migrations_d2h"] == 0 and res.get("host", 0) == 0,
              "memory went to host although GPU 1 had room (d2h %d, host resident %d)"
              % (st["migrations_d2h"], res.get("host", 0)))
    gt.expect(res.get("1", 0) > 0 or int(got.result["weights_at"].get("1", 0)) > 0,
              "nothing resident on GPU 1 at the end")


def case_threshold_rule():
    avail = gt.host_available_bytes()
    if avail is not None and avail < 10 * GiB:
        raise gt.Skip("only %.1f GiB of host memory available (10 GiB needed)" % (avail / GiB))
    fd, conf = tempfile.mkstemp(suffix=".conf", prefix="gvm-rule-")
    with os.fdopen(fd, "w") as f:
        f.write("# gpu suite: big allocations live in host memory\n[rule big-in-host]\nsize = 2G-\nplace = host\n")
    try:
        got = gt.run_child(__file__, "threshold", {}, shim=True, env={"GVM_CONFIG": conf})
    finally:
        os.unlink(conf)
    r = got.result
    info = r["info"]
    print("  2.5 GiB tensor: location %d, %d bytes on host; 1 GiB tensor at %d; t*2 at %d; sum %.0f (ref %.0f)"
          % (info["location"], info["bytes_on_host"], r["device_tensor_location"], r["doubled_location"],
             r["sum"], r["ref_sum"]))
    gt.expect(info["location"] == -1, "the 2.5 GiB tensor is at location %d, want host (-1)" % info["location"])
    gt.expect(info["size"] >= r["tensor_bytes"], "its allocation is %d bytes" % info["size"])
    gt.expect(info["device"] == 0, "it reports device %d" % info["device"])
    gt.expect(r["device_tensor_location"] == 0, "a 1 GiB tensor is at %d, want device 0 (below the rule)"
              % r["device_tensor_location"])
    gt.expect(r["doubled_location"] == -1, "t * 2 (2.5 GiB) is at %d, want host" % r["doubled_location"])
    gt.expect(r["sum"] == r["ref_sum"], "(t * 2).sum() = %r, want %r" % (r["sum"], r["ref_sum"]))
    gt.expect(r["ref_cpu_equal"], "the GPU reference matmul differs from the CPU one")
    gt.expect(r["mm_equal"], "the matmul on the host-resident tensor differs from the reference")
    gt.expect(got.stats["alloc_failures"] == 0, "allocations failed")


def case_pause_resume():
    got = gt.run_child(__file__, "pause", {}, shim=True)
    r, st = got.result, got.stats
    mb = r["model_bytes"]
    print("  model %.0f MiB; free grew by %.0f MiB (keep) and %.0f MiB (discard); paused location %d"
          % (mb / MiB, r["free_gain_keep"] / MiB, r["free_gain_discard"] / MiB, r["paused_info"]["location"]))
    gt.expect(r["paused_info"]["paused"] == 1 and r["paused_info"]["location"] == -1,
              "while paused (keep): paused %d location %d, want 1 and host"
              % (r["paused_info"]["paused"], r["paused_info"]["location"]))
    gt.expect(r["free_gain_keep"] >= 0.75 * mb, "pause gave back %.0f MiB of a %.0f MiB model"
              % (r["free_gain_keep"] / MiB, mb / MiB))
    gt.expect(r["resumed_info"]["paused"] == 0 and r["resumed_info"]["location"] == 0,
              "after resume: paused %d location %d" % (r["resumed_info"]["paused"], r["resumed_info"]["location"]))
    gt.expect(r["keep_equal"], "outputs after pause/resume differ")
    gt.expect(r["discard_info"]["paused"] == 1, "pause with discard did not pause")
    gt.expect(r["free_gain_discard"] >= 0.75 * mb, "pause with discard gave back %.0f MiB"
              % (r["free_gain_discard"] / MiB))
    gt.expect(r["zeros_after_discard"], "after a discarding pause the parameters are not zero")
    gt.expect(r["reload_equal"], "outputs after reloading the state dict differ")
    gt.expect(st["pauses"] > 0 and st["resumes"] > 0, "stats: pauses %d resumes %d" % (st["pauses"], st["resumes"]))


def case_resume_at_limit():
    env = {"GVM_DEVICE_LIMIT": "0:" + LIMIT, "GVM_SPILL": "host"}
    got = gt.run_child(__file__, "resume_at_limit", {"filler_mib": 1536}, shim=True, env=env,
                       label="resume at the limit (shim)")
    r, st = got.result, got.stats
    print("  resume: %s; model equal %s, filler intact %s; spills %d, resumes %d, held_peak %s"
          % (r["resume_error"] or "ok", r.get("model_equal"), r["filler_ok"], st["spills"], st["resumes"],
             st.get("held_peak")))
    gt.expect(r["resume_error"] is None, "gvm_resume failed at the limit with spill on: %s" % r["resume_error"])
    gt.expect(r.get("model_equal"), "the model's outputs after the resume differ")
    gt.expect(r["filler_ok"], "the buffer made while the model was paused lost its contents")
    gt.expect(st["spills"] >= 1, "nothing spilled, yet the model and the buffer exceed the limit")
    gt.expect(int(st["held_peak"]["0"]) <= LIMIT_BYTES, "gvmshim held %s bytes on GPU 0, limit %d"
              % (st["held_peak"]["0"], LIMIT_BYTES))


def case_cached_first():
    env = {"GVM_DEVICE_LIMIT": LIMIT, "GVM_SPILL": "host", "PYTORCH_NO_CUDA_MEMORY_CACHING": None}
    over = gt.run_child(__file__, "cached", {"a": 800, "b": 600, "c": 1000}, shim=True, env=env,
                        label="cached (shim, A+B+C > limit)")
    r, st = over.result, over.stats
    print("  A 800 MiB at %d, B's cached 600 MiB segment at %d, C 1000 MiB at %d; spills %d, launches_scanned %d"
          % (r["a"], r["b_segment"], r["c"], st["spills"], st["launches_scanned"]))
    gt.expect(r["a_ok"] and r["c_ok"], "tensor values are wrong (A ok %s, C ok %s)" % (r["a_ok"], r["c_ok"]))
    gt.expect(st["spills"] >= 1, "nothing spilled, yet A+B+C exceed the limit")
    gt.expect(r["b_segment"] == -1, "B's cached segment is at %d, want host: it is the coldest" % r["b_segment"])
    gt.expect(r["a"] == 0, "A (in use) was moved to %d" % r["a"])
    gt.expect(r["c"] == 0, "C is at %d, want device 0" % r["c"])
    fits = gt.run_child(__file__, "cached", {"a": 800, "b": 400, "c": 600}, shim=True, env=env,
                        label="cached (shim, fits)")
    print("  a job that fits: spills %d" % fits.stats["spills"])
    gt.expect(fits.result["a_ok"] and fits.result["c_ok"], "tensor values are wrong in the job that fits")
    gt.expect(fits.stats["spills"] == 0, "a job that fits spilled %d times" % fits.stats["spills"])


def case_lazy_two_streams():
    args = {"weights": 24, "rows": 4096, "steps": 6}   # 24 x 128 MiB: 1.5x the limit
    ref = gt.run_child(__file__, "two_streams", args, shim=False)
    got = gt.run_child(__file__, "two_streams", args, shim=True,
                       env={"GVM_DEVICE_LIMIT": LIMIT, "GVM_SPILL": "host", "GVM_SPILL_HOST_MAP": "lazy"})
    st = got.stats
    print("  sums %s (native %s); spills %d, swaps that waited for their regions' last uses %d"
          % (got.result["sums"][-1], ref.result["sums"][-1], st["spills"], st["use_waits"]))
    gt.expect(got.result["sums"] == ref.result["sums"], "sums differ from the native run: %s vs %s"
              % (got.result["sums"], ref.result["sums"]))
    gt.expect(st["spills"] > 0, "nothing spilled: the case tests nothing")
    gt.expect(st["use_waits"] > 0, "no swap waited for its regions' events: the case tests nothing")


def main():
    return gt.suite_main("torch-policy", "torch", HANDLERS,
                         [("spill_host", case_spill_host), ("spill_peer", case_spill_peer),
                          ("threshold_rule", case_threshold_rule), ("pause_resume", case_pause_resume),
                          ("resume_at_limit", case_resume_at_limit),
                          ("cached_first", case_cached_first), ("lazy_two_streams", case_lazy_two_streams)])


if __name__ == "__main__":
    sys.exit(main())
