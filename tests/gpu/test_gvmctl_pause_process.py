#!/usr/bin/env python3
"""gvmctl pause PID (no tag: the whole process) on an unmodified PyTorch
training job that keeps running meanwhile. The job (an MLP trained with
Adam; fixed seeds, no TF32; no gvmshim import, no tag) trains step after
step; the test, from outside:

  whole_process  gvmctl pause PID: it answers in bytes ("paused X (device 0:
                 X to host) in S s, R GB/s; released Y to the driver"); the
                 job keeps training while paused (its kernels read and write
                 the paused memory in host memory); NVML shows the process
                 within 64 MiB of a process that allocated nothing (measured
                 here: the same job run natively, everything it allocated
                 freed, PyTorch's cache and cuBLAS workspaces emptied); a
                 second pause says there is nothing to pause; gvmctl resume
                 PID brings the memory back (NVML); the job's losses are bit
                 for bit those of the same number of steps run natively

Exit 77 without torch or a GPU.
"""
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402
from gvmnvml import smi_used, try_nvml  # noqa: E402

MiB, GiB = gt.MiB, gt.GiB
JOB = {"layers": 8, "dim": 2048, "batch": 256, "lr": 1e-3}
SLACK = 64 * MiB            # paused: at most this above a process that allocated nothing
STEPS_WHILE_PAUSED = 3      # the job must train at least this many steps while paused


# ---- the children --------------------------------------------------------------------


def build(torch, args):
    import torch.nn as nn
    dev = torch.device("cuda", 0)
    d, layers = args["dim"], args["layers"]
    torch.manual_seed(11)
    model = nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(d, d, device=dev), nn.ReLU())],
                          nn.Linear(d, 16, device=dev))
    opt = torch.optim.Adam(model.parameters(), lr=args["lr"])
    g = torch.Generator(device=dev)
    g.manual_seed(5)
    x = torch.randn(args["batch"], d, device=dev, generator=g)
    target = torch.randn(args["batch"], 16, device=dev, generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = ((model(x) - target) ** 2).mean()
        loss.backward()
        opt.step()
        return float(loss.item()).hex()
    return model, opt, step


def child_baseline(args):
    """Natively: the job's first steps, then everything it allocated freed.
    What NVML shows then is the context, the loaded kernels and the
    libraries' handles: a process that holds no allocation."""
    torch = gt.torch_or_skip()
    model, opt, step = build(torch, args)
    for _ in range(2):
        step()
    del model, opt, step
    import gc
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
        torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
    nvml, missing = try_nvml(1)
    return {"nvml": nvml.used(0) if nvml else None, "nvml_missing": missing,
            "allocated": torch.cuda.memory_allocated(0), "reserved": torch.cuda.memory_reserved(0)}


def child_reference(args):
    """Natively: `steps` steps, for the losses."""
    torch = gt.torch_or_skip()
    _, _, step = build(torch, args)
    return {"losses": [step() for _ in range(args["steps"])]}


def child_job(args):
    """Trains until told to finish; answers "measure" on stdin meanwhile
    (NVML of this process, steps so far) without stopping."""
    torch = gt.torch_or_skip()
    free, _ = torch.cuda.mem_get_info(0)
    if free < 2 * GiB:
        gt.child_skip("not enough GPU memory: %d MiB free" % (free // MiB))
    _, _, step = build(torch, args)
    nvml, missing = try_nvml(1)
    losses = []
    done = threading.Event()
    out_lock = threading.Lock()

    def say(line):
        with out_lock:
            print(line)
            sys.stdout.flush()

    def serve():
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "go":
                done.set()
                return
            if cmd == "measure":
                import json
                say("MEASURE " + json.dumps({"nvml": nvml.used(0) if nvml else None, "nvml_missing": missing,
                                             "steps": len(losses)}))
        done.set()

    for _ in range(3):
        losses.append(step())
    say("AT running {}")
    threading.Thread(target=serve, daemon=True).start()
    while not done.is_set() and len(losses) < 100000:
        losses.append(step())
    return {"losses": losses}


HANDLERS = {"baseline": child_baseline, "reference": child_reference, "steady": child_job}


# ---- the parent ------------------------------------------------------------------------


def mib(v):
    return "n/a" if v is None else "%.0f MiB" % (v / MiB)


def wait_steps(job, n, limit_s=120):
    """Measures until the job has trained n more steps; the last measure."""
    first = job.measure()
    t0 = time.time()
    while True:
        m = job.measure()
        if m["steps"] >= first["steps"] + n:
            return m
        if time.time() - t0 > limit_s:
            raise gt.Failure("the job trained %d steps in %d s (wanted %d more): stalled"
                             % (m["steps"] - first["steps"], limit_s, n))
        time.sleep(0.05)


def used(job, m):
    """NVML's entry for the job (its own view), else nvidia-smi's."""
    return m["nvml"] if m["nvml"] is not None else smi_used(job.pid)


REPORT = re.compile(r"paused (\d+\.\d) (MiB|GiB) \(device 0: \1 \2 to host\) in \d+\.\d\d s, \d+\.\d GB/s; "
                    r"released \d+(\.\d)? (B|KiB|MiB|GiB) to the driver\n")


def case_whole_process():
    gt.gvmctl_path()
    base = gt.run_child(__file__, "baseline", JOB, shim=False, label="baseline: allocated nothing (native)")
    baseline = base.result["nvml"]
    print("  a process that allocated nothing: NVML %s (PyTorch allocated %d, reserved %d)"
          % (mib(baseline), base.result["allocated"], base.result["reserved"]))
    job = gt.LiveChild(__file__, "steady", JOB, shim=True, label="unmodified training job (shim)")
    try:
        job.at("running")
        before = wait_steps(job, 2)
        rc, out, err = job.ctl("pause", job.pid)
        gt.expect(rc == 0, "gvmctl pause exit %d: %s" % (rc, err.strip()))
        gt.expect(REPORT.fullmatch(out), "gvmctl pause printed %r" % out)
        paused = job.measure()
        later = wait_steps(job, STEPS_WHILE_PAUSED)
        rc2, out2, _ = job.ctl("pause", job.pid)
        # Nothing left, unless PyTorch made a new segment while paused (an
        # ordinary allocation, which a second pause takes).
        gt.expect(rc2 == 0 and out2.startswith(("nothing to pause: every allocation is paused already", "paused")),
                  "a second pause: exit %d, %r" % (rc2, out2))
        rc, out, err = job.ctl("resume", job.pid)
        gt.expect(rc == 0 and out.startswith("resumed"), "gvmctl resume exit %d: %r %s" % (rc, out, err.strip()))
        resumed = wait_steps(job, 2)
        job.go()
        got = job.finish()
    finally:
        job.cleanup()
    u_before, u_paused, u_later, u_resumed = (used(job, m) for m in (before, paused, later, resumed))
    print("  process on the GPU: %s training, %s just paused, %s after %d steps paused, %s resumed"
          % (mib(u_before), mib(u_paused), mib(u_later), later["steps"] - paused["steps"], mib(u_resumed)))
    if baseline is not None and u_paused is not None:
        for what, u in (("just paused", u_paused), ("paused, training", u_later)):
            gt.expect(u <= baseline + SLACK, "NVML %s: %s, a process that allocated nothing %s (slack %s)"
                      % (what, mib(u), mib(baseline), mib(SLACK)))
        gt.expect(u_resumed - u_paused >= 0.75 * (u_before - u_paused),
                  "NVML after resume %s, before the pause %s: the memory is not back" % (mib(u_resumed),
                                                                                        mib(u_before)))
    else:
        print("  (NVML does not list the processes: %s; no memory check)"
              % (base.result["nvml_missing"] or before["nvml_missing"]))
    st = got.stats
    gt.expect(st["pauses"] >= 1 and st["resumes"] >= 1, "stats: pauses %d resumes %d" % (st["pauses"],
                                                                                       st["resumes"]))
    losses = got.result["losses"]
    ref = gt.run_child(__file__, "reference", dict(JOB, steps=len(losses)), shim=False,
                       label="reference: %d steps (native)" % len(losses))
    worst = gt.compare_series(ref.result["losses"], losses, 0.0, "losses vs native")
    gt.expect(worst == 0.0, "losses differ from the native run")
    print("  %d losses bit for bit those of the native run" % len(losses))


def main():
    return gt.suite_main("gvmctl-pause-process", "torch", HANDLERS, [("whole_process", case_whole_process)])


if __name__ == "__main__":
    sys.exit(main())
