#!/usr/bin/env python3
"""PyTorch under gvmshim. The parent process runs without the shim and
starts each job as a child, natively or under the shim (GVM_TEST_LIB),
with the environment a case needs, then compares what the children print.

Cases: same losses with and without the shim; a training loop needing
1.5x GVM_DEVICE_LIMIT completes under GVM_SPILL=host with the same losses;
on two GPUs a single-GPU job spills to the peer first; the threshold rule
puts a large tensor in host memory and kernels compute on it correctly;
pause/resume of a tagged model gives identical outputs; cached blocks of
the caching allocator are what leaves the GPU first, and a job that fits
never spills.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.join(HERE, "..", "..", "python")
LIB = os.environ.get("GVM_TEST_LIB", "")
GiB = 1 << 30


def child(code, shim, env=None, stats=False):
    """Runs code in a fresh python; returns (stdout lines, stats dict)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("GVM_") or k.startswith("GVM_TEST_")}
    e.pop("LD_PRELOAD", None)
    e.update(env or {})
    e["PYTHONPATH"] = PYDIR + os.pathsep + e.get("PYTHONPATH", "")
    e["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"   # deterministic cuBLAS, as use_deterministic_algorithms needs
    path = None
    if shim:
        e["LD_PRELOAD"] = LIB
        if stats:
            fd, path = tempfile.mkstemp(suffix=".json")
            os.close(fd)
            e["GVM_STATS"] = path
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError("child failed (%d):\n%s\n%s" % (r.returncode, r.stdout[-3000:], r.stderr[-3000:]))
    st = None
    if path:
        st = json.load(open(path))
        os.unlink(path)
    return r.stdout.strip().splitlines(), st


TRAIN = r"""
import torch
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
WIDTH, LAYERS, STEPS = {width}, {layers}, {steps}
dev = "cuda"
layers = [torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS)]
model = torch.nn.Sequential(*[m for l in layers for m in (l, torch.nn.Tanh())]).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(256, WIDTH, device=dev)
y = torch.randn(256, WIDTH, device=dev)
for step in range(STEPS):
    opt.zero_grad(set_to_none=False)
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    print(repr(loss.item()))
"""

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def case_same_losses():
    code = TRAIN.format(width=1024, layers=4, steps=20)
    native, _ = child(code, False)
    shim, st = child(code, True, stats=True)
    check(native == shim, "losses differ under the shim:\n%s\n%s" % (native[:3], shim[:3]))
    check(st["allocations_total"] > 0, "nothing was served by gvmshim")
    probe = r"""
import torch, gvmshim
w = torch.nn.Linear(4096, 4096).cuda().weight
i = gvmshim.query(w.data_ptr())
print(i.location, i.device, i.size >= 4096 * 4096 * 4)
"""
    out, _ = child(probe, True)
    check(out == ["0 0 True"], "gvmshim.query on a weight: %s" % out)


def case_spill_to_host():
    # 12 layers of 8192^2 fp32: 3 GiB of weights, plus gradients: ~6.2 GiB
    # live; the device limit is 4 GiB, about 1.5x over.
    code = TRAIN.format(width=8192, layers=12, steps=4)
    native, _ = child(code, False)
    env = {"GVM_DEVICE_LIMIT": "4G", "GVM_SPILL": "host"}
    shim, st = child(code, True, env, stats=True)
    check(native == shim, "losses differ when spilling:\n%s\n%s" % (native, shim))
    check(st["spills"] > 0, "no spill happened (spills=%d)" % st["spills"])
    print("spill to host: %d spills, %.1f GiB moved" % (st["spills"], st["bytes_migrated"] / GiB))


def case_spill_to_peer_first(ngpu):
    if ngpu < 2:
        print("skip: peer spill needs two GPUs")
        return
    code = TRAIN.format(width=8192, layers=12, steps=3)
    native, _ = child(code, False)
    env = {"GVM_DEVICE_LIMIT": "0:4G", "GVM_SPILL": "peer,host"}
    shim, st = child(code, True, env, stats=True)
    check(native == shim, "losses differ when spilling to the peer")
    res = st["resident_bytes"]
    check(st["spills"] > 0 and st["migrations_d2d"] > 0 and st["migrations_d2h"] == 0,
          "spilled to the peer first: %s d2d=%d d2h=%d" % (res, st["migrations_d2d"], st["migrations_d2h"]))


def case_threshold_rule():
    conf = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
    conf.write("[rule big-in-host]\nsize = 2G-\nplace = host\n")
    conf.close()
    code = r"""
import torch, gvmshim
n = (5 << 30) // 2 // 4          # a 2.5 GiB float tensor
t = torch.full((n,), 3.0, device="cuda")
small = torch.ones(1 << 20, device="cuda")
i = gvmshim.query(t.data_ptr())
print(i.location == gvmshim.HOST, gvmshim.query(small.data_ptr()).location == 0)
print(float((t * 2).sum(dtype=torch.float64)) == 6.0 * n)
torch.manual_seed(1)
t[: 4096 * 1024].copy_(torch.randn(4096 * 1024, device="cuda"))
a = t[: 4096 * 1024].view(4096, 1024)        # lives in host memory
b = torch.randn(1024, 64, device="cuda")
print(torch.allclose(a @ b, a.clone() @ b, rtol=1e-4, atol=1e-3))
"""
    out, st = child(code, True, {"GVM_CONFIG": conf.name}, stats=True)
    os.unlink(conf.name)
    check(out == ["True True", "True", "True"], "threshold rule: %s" % out)
    check(st["spills"] == 0, "placement by rule is not a spill")


def case_pause_resume():
    code = r"""
import torch, gvmshim
torch.manual_seed(0)
pool = torch.cuda.MemPool()
with gvmshim.tag("model"), torch.cuda.use_mem_pool(pool):
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(16)]).cuda()
x = torch.randn(64, 4096, device="cuda")
with torch.no_grad():
    before = model(x)
torch.cuda.synchronize()
free0 = torch.cuda.mem_get_info()[0]
gvmshim.pause("model")
free1 = torch.cuda.mem_get_info()[0]
size = sum(p.numel() * 4 for p in model.parameters())
print(free1 - free0 >= 0.9 * size)
gvmshim.resume("model")
with torch.no_grad():
    after = model(x)
print(torch.equal(before, after))
saved = {k: v.cpu() for k, v in model.state_dict().items()}
gvmshim.pause("model", discard=True)
gvmshim.resume("model")
print(all(float(p.abs().sum()) == 0.0 for p in model.parameters()))
model.load_state_dict(saved)
with torch.no_grad():
    print(torch.equal(before, model(x)))
"""
    out, st = child(code, True, stats=True)
    check(out == ["True", "True", "True", "True"], "pause/resume: %s" % out)
    check(st["pauses"] > 0 and st["resumes"] > 0, "pauses %d resumes %d" % (st["pauses"], st["resumes"]))


def case_cached_blocks_leave_first():
    code = r"""
import torch, gvmshim
GB = 1 << 30
a = torch.ones(GB // 4, device="cuda")          # 1 GiB, used every step
b = torch.ones(GB // 4, device="cuda")          # 1 GiB, freed: cached by PyTorch
pb = b.data_ptr()
del b
for _ in range(3):
    a.mul_(1.0)
c = torch.ones(int(1.5 * GB) // 4, device="cuda")   # needs room under the 3 GiB limit
a.add_(1.0)
print(gvmshim.query(a.data_ptr()).location, gvmshim.query(pb).location, gvmshim.query(c.data_ptr()).location)
print(float(a[12345]), float(c[-1]))
"""
    env = {"GVM_DEVICE_LIMIT": "3G", "GVM_SPILL": "host", "GVM_CACHE_LIMIT": "0", "GVM_POOL_LIMIT": "0"}
    out, st = child(code, True, env, stats=True)
    check(out == ["0 -1 0", "2.0 1.0"], "cached segment should leave first: %s" % out)
    check(st["spills"] >= 1, "spills=%d" % st["spills"])
    fits = r"""
import torch
xs = [torch.ones(256 << 20 >> 2, device="cuda") for _ in range(8)]
for _ in range(20):
    xs = [x * 1.0 for x in xs]
print(float(sum(float(x.sum()) for x in xs)))
"""
    out, st = child(fits, True, {"GVM_DEVICE_LIMIT": "8G", "GVM_SPILL": "host"}, stats=True)
    check(st["spills"] == 0, "a job that fits spilled %d times" % st["spills"])


def main():
    try:
        import torch
    except ImportError:
        print("no torch: skipped")
        return 77
    if not torch.cuda.is_available():
        print("no GPU: skipped")
        return 77
    if not LIB:
        print("GVM_TEST_LIB is not set")
        return 1
    ngpu = torch.cuda.device_count()
    cases = [case_same_losses, case_spill_to_host, lambda: case_spill_to_peer_first(ngpu), case_threshold_rule,
             case_pause_resume, case_cached_blocks_leave_first]
    only = sys.argv[1:]
    for c in cases:
        name = getattr(c, "__name__", "")
        if only and name not in only:
            continue
        try:
            c()
        except Exception as e:      # one broken case must not hide the others
            check(False, "%s raised %s" % (name, e))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
