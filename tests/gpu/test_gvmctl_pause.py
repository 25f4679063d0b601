#!/usr/bin/env python3
"""gvmctl pause/resume on a running PyTorch job, steered from outside. The
job (an MLP trained with plain SGD; weights allocated under the tag "model"
from their own torch.cuda.MemPool; fixed seeds, no TF32) trains a few
steps, stops at a barrier, and continues when the test says so. Meanwhile
the test runs gvmctl against its pid and checks the memory with the tools
a user has: NVML (the job's own process entry, else nvidia-smi
--query-compute-apps) and torch.cuda.mem_get_info inside the job.

  pause_keep     gvmctl pause PID model: NVML shows the process's device
                 memory drop by at least 3/4 of the model's bytes, the job's
                 free memory grows as much, the weights are on the host
                 (gvmshim.query, gvmctl list); gvmctl resume PID model: the
                 memory is back; the job continues, and every loss and
                 output is bit for bit that of the same job run without a
                 pause under the shim, and natively
  pause_unmapped gvmctl pause PID model --unmapped (GVM_PAUSE_UNMAPPED: the
                 copy waits in host memory mapped nowhere in the job's range):
                 the same checks as pause_keep
  pause_unmapped_cold  the same with GVM_HOST_PREFILL=off: no host memory is
                 ready, so the pause pins pages of the job's own
                 (GVM_HOST_REGISTER) while its copies run
  pause_discard  gvmctl pause PID model --discard: the same release; after
                 resume the parameters are zero (what gvm_pause with
                 GVM_PAUSE_DISCARD documents: resume gives zeroed memory);
                 the job reloads them from a CPU copy and continues bit for
                 bit

Exit 77 without torch, a GPU, or torch.cuda.MemPool.
"""
import contextlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402
from gvmnvml import smi_used, try_nvml  # noqa: E402

MiB, GiB = gt.MiB, gt.GiB
JOB = {"layers": 8, "dim": 4096, "batch": 64, "steps": 3, "lr": 0.01}


# ---- the job (a child) ---------------------------------------------------------------


def child_job(args):
    torch = gt.torch_or_skip()
    import torch.nn as nn

    if not hasattr(torch.cuda, "MemPool") or not hasattr(torch.cuda, "use_mem_pool"):
        gt.child_skip("this torch (%s) has no torch.cuda.MemPool/use_mem_pool" % torch.__version__)
    free, _ = torch.cuda.mem_get_info(0)
    if free < 2 * GiB:
        gt.child_skip("not enough GPU memory: %d MiB free" % (free // MiB))
    gvmshim = None
    if args.get("shim"):
        import gvmshim
    dev = torch.device("cuda", 0)
    d, layers, lr = args["dim"], args["layers"], args["lr"]
    torch.manual_seed(11)
    pool = torch.cuda.MemPool()
    # The tag names the model's memory; its own pool keeps its segments
    # free of anything else.
    with (gvmshim.tag("model") if gvmshim else contextlib.nullcontext()), torch.cuda.use_mem_pool(pool):
        model = nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(d, d, device=dev), nn.ReLU())],
                              nn.Linear(d, 16, device=dev))
    params = list(model.parameters())
    g = torch.Generator(device=dev)
    g.manual_seed(5)
    x = torch.randn(args["batch"], d, device=dev, generator=g)
    target = torch.randn(args["batch"], 16, device=dev, generator=g)
    probe = torch.randn(args["batch"], d, device=dev, generator=g)
    losses, outputs = [], []

    def train(steps):
        for _ in range(steps):
            loss = ((model(x) - target) ** 2).mean()
            loss.backward()
            with torch.no_grad():
                for p in params:
                    p.sub_(lr * p.grad)
                    p.grad = None
            losses.append(float(loss.item()).hex())
        with torch.no_grad():
            outputs.append([v.hex() for v in model(probe).flatten().tolist()])
        torch.cuda.synchronize()

    train(args["steps"])
    snapshot = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    nvml, nvml_missing = try_nvml(1)

    def measure():
        free, total = torch.cuda.mem_get_info(0)
        m = {"free": free, "nvml": nvml.used(0) if nvml else None, "nvml_missing": nvml_missing}
        if gvmshim:
            m["info"] = gt.gvm_info_dict(gvmshim.query(params[0].data_ptr()))
        return m

    gt.barrier("pause", {"model_bytes": sum(p.numel() * p.element_size() for p in params)}, measure)
    res = {}
    if args.get("reload"):
        # The weights were discarded: see what resume gave back, then load them again.
        res["zero_after_resume"] = all(int(p.count_nonzero().item()) == 0 for p in params)
        model.load_state_dict(snapshot)
    train(args["steps"])
    res.update(losses=losses, outputs=outputs)
    return res


HANDLERS = {"job": child_job}


# ---- the parent ------------------------------------------------------------------------


def used(job):
    """The job's own measure, plus what the user's tools say it holds on the
    GPU: `used` is NVML's entry for the process (its own view, else
    nvidia-smi), or None when neither lists it."""
    m = job.measure()
    m["smi"] = smi_used(job.pid)
    m["used"] = m["nvml"] if m["nvml"] is not None else m["smi"]
    return m


def mib(v):
    return "n/a" if v is None else "%.0f MiB" % (v / MiB)


def plain(shim):
    """The job without a pause: natively, or under the shim."""
    def run():
        job = gt.LiveChild(__file__, "job", dict(JOB, shim=shim), shim=shim,
                           label="job without pause (%s)" % ("shim" if shim else "native"))
        try:
            job.at("pause")
            job.go()
            return job.finish()
        finally:
            job.cleanup()
    return gt.once("plain shim" if shim else "plain native", run)


def same_run(ref, got, what):
    worst = gt.compare_series(ref.result["losses"], got.result["losses"], 0.0, "losses vs " + what)
    gt.expect(worst == 0.0, "losses differ from %s" % what)
    a, b = ref.result["outputs"], got.result["outputs"]
    gt.expect(len(a) == len(b), "%d output sets vs %d (%s)" % (len(b), len(a), what))
    for phase, (x, y) in enumerate(zip(a, b)):
        diff = sum(1 for u, v in zip(x, y) if u != v)
        gt.expect(len(x) == len(y) and diff == 0, "outputs after phase %d: %d of %d values differ from %s"
                  % (phase + 1, diff, len(x), what))
    print("  %d losses and %d outputs bit for bit those of %s" % (len(ref.result["losses"]),
                                                                 sum(len(x) for x in a), what))


def case_pause(flag=None, env=None):
    discard = flag == "--discard"

    def case():
        gt.gvmctl_path()
        native, shim_ref = plain(False), plain(True)
        label = "job paused from outside%s (shim)" % (" with " + flag if flag else "")
        job = gt.LiveChild(__file__, "job", dict(JOB, shim=True, reload=discard), shim=True, env=env, label=label)
        try:
            mb = job.at("pause")["model_bytes"]
            before = used(job)
            if before["used"] is None:
                print("  (NVML does not list the job: %s; nvidia-smi neither: checking mem_get_info only)"
                      % before["nvml_missing"])
            rc, out, err = job.ctl("pause", job.pid, "model", *([flag] if flag else []))
            gt.expect(rc == 0, "gvmctl pause exit %d: %s" % (rc, err.strip()))
            gt.expect(out.startswith("paused"), "gvmctl pause printed %r" % out)
            paused = used(job)
            listing = None
            if not discard:
                rc, out, err = job.ctl("list", "--json", quiet=True)
                gt.expect(rc == 0, "gvmctl list --json exit %d: %s" % (rc, err.strip()))
                listing = [p for p in json.loads(out) if p["pid"] == job.pid]
            rc, out, err = job.ctl("resume", job.pid, "model")
            gt.expect(rc == 0, "gvmctl resume exit %d: %s" % (rc, err.strip()))
            gt.expect(out.startswith("resumed"), "gvmctl resume printed %r" % out)
            resumed = used(job)
            job.go()
            got = job.finish()
        finally:
            job.cleanup()

        gain = paused["free"] - before["free"]
        print("  model %s; process on the GPU (NVML): %s before, %s paused, %s resumed (nvidia-smi: %s, %s, %s); "
              "free memory in the job grew by %s"
              % (mib(mb), mib(before["used"]), mib(paused["used"]), mib(resumed["used"]), mib(before["smi"]),
                 mib(paused["smi"]), mib(resumed["smi"]), mib(gain)))
        pi, ri = paused["info"], resumed["info"]
        print("  first weight while paused: paused %d location %d; after resume: paused %d location %d"
              % (pi["paused"], pi["location"], ri["paused"], ri["location"]))
        gt.expect(pi["paused"] == 1, "gvmshim.query says the weights are not paused after gvmctl pause")
        if not discard:
            gt.expect(pi["location"] == -1, "paused weights at location %d, want host (-1)" % pi["location"])
            me = listing[0]["devices"][0] if listing and listing[0]["devices"] else {}
            print("  gvmctl list while paused: device 0 held %s, on host %s"
                  % (mib(me.get("held")), mib(me.get("on_host"))))
            gt.expect(me.get("on_host", 0) >= mb, "gvmctl list shows %s of device 0's allocations on the host, "
                      "the model has %s" % (mib(me.get("on_host")), mib(mb)))
        gt.expect(gain >= 0.75 * mb, "the job's free GPU memory grew by %s on pause, model %s" % (mib(gain), mib(mb)))
        if before["used"] is not None and paused["used"] is not None:
            gt.expect(before["used"] - paused["used"] >= 0.75 * mb,
                      "NVML: the process went from %s to %s on pause, model %s: device memory not released"
                      % (mib(before["used"]), mib(paused["used"]), mib(mb)))
            gt.expect(resumed["used"] - paused["used"] >= 0.75 * mb,
                      "NVML: the process went from %s to %s on resume, model %s: memory not back"
                      % (mib(paused["used"]), mib(resumed["used"]), mib(mb)))
        gt.expect(ri["paused"] == 0 and ri["location"] == 0,
                  "after gvmctl resume: paused %d location %d, want 0 and device 0" % (ri["paused"], ri["location"]))
        if discard:
            print("  parameters after resume all zero: %s (then reloaded from a CPU copy)"
                  % got.result["zero_after_resume"])
            gt.expect(got.result["zero_after_resume"], "after a discarding pause and resume the parameters are not "
                      "zero (gvm_pause documents zeroed memory)")
        st = got.stats
        gt.expect(st["pauses"] >= 1 and st["resumes"] >= 1, "stats: pauses %d resumes %d"
                  % (st["pauses"], st["resumes"]))
        same_run(shim_ref, got, "the same job without pause under the shim")
        same_run(native, got, "the job run natively")
    return case


def main():
    return gt.suite_main("gvmctl-pause", "torch", HANDLERS,
                         [("pause_keep", case_pause()), ("pause_unmapped", case_pause("--unmapped")),
                          ("pause_unmapped_cold", case_pause("--unmapped", {"GVM_HOST_PREFILL": "off"})),
                          ("pause_discard", case_pause("--discard"))])


if __name__ == "__main__":
    sys.exit(main())
