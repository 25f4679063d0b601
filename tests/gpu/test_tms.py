#!/usr/bin/env python3
"""The torch_memory_saver drop-in (python/torch_memory_saver) driven as
SGLang's TorchMemorySaverAdapter drives torch_memory_saver, on a small
transformers Llama built from its config (random weights, no download):

  - the model is built inside region("weights", enable_cpu_backup=True),
    a KV-cache-like buffer inside region("kv_cache"); a few ops are
    captured with cuda_graph(tag="cuda_graph"); greedy generation gives
    the reference tokens, the weights a CPU copy;
  - pause kv_cache, pause weights, pause cuda_graph (SGLang's release
    order): the process's memory as NVML shows it drops by at least 90 %
    of the paused bytes; a second pause of kv_cache does nothing; an
    allocation elsewhere, and one inside the paused kv_cache region,
    work (the latter is live);
  - resume cuda_graph, weights, kv_cache (SGLang's order; kv_cache twice):
    generation gives the same tokens, the weights equal their copy bit for
    bit, the graph's replay its first output, the allocation made while
    paused its contents; every tensor kept its data_ptr.

Exit 77 without torch, transformers, torch.cuda.MemPool or a GPU.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvmtest as gt  # noqa: E402
from gvmnvml import try_nvml  # noqa: E402

MiB, GiB = gt.MiB, gt.GiB
KV_BYTES = 2 * GiB
PROMPT, NEW_TOKENS = 24, 24


def child_sglang(args):
    torch = gt.torch_or_skip()
    if not hasattr(torch.cuda, "MemPool") or not hasattr(torch.cuda, "use_mem_pool"):
        gt.child_skip("no torch.cuda.MemPool (torch too old)")
    try:
        from transformers import AutoModelForCausalLM, LlamaConfig
    except ImportError:
        gt.child_skip("no transformers")
    import torch_memory_saver
    from torch_memory_saver import torch_memory_saver as tms
    here = os.path.dirname(os.path.dirname(os.path.abspath(torch_memory_saver.__file__)))
    if os.path.realpath(here) != os.path.realpath(gt.PYDIR):
        raise RuntimeError("imported torch_memory_saver from %s, not gvmshim's drop-in in %s" % (here, gt.PYDIR))
    nvml, missing = try_nvml(1)
    dev = torch.device("cuda", 0)
    torch.manual_seed(1234)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=4096, num_hidden_layers=8,
                      num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=512)
    with tms.region(tag="weights", enable_cpu_backup=True):
        model = AutoModelForCausalLM.from_config(cfg).to(dev).eval()
    with tms.region(tag="kv_cache"):
        kv = torch.full((KV_BYTES // 4,), 3.0, device=dev)
    params = list(model.parameters())
    ptrs = [p.data_ptr() for p in params] + [kv.data_ptr()]
    weight_bytes = sum(p.numel() * p.element_size() for p in params)
    cpu_copy = [p.detach().cpu() for p in params]

    # A few ops captured into a graph under its own tag.
    g_in = torch.randn(256, 1024, device=dev)
    g_w = torch.randn(1024, 1024, device=dev) / 32
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.tanh(g_in @ g_w)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with tms.cuda_graph(cuda_graph=graph, tag="cuda_graph"):
        g_out = torch.tanh(g_in @ g_w)
    graph.replay()
    g_ref = g_out.clone()

    ids = torch.randint(0, cfg.vocab_size, (1, PROMPT), device=dev, generator=torch.Generator(device=dev).manual_seed(7))

    def generate():
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False,
                                 pad_token_id=0)
        return out[0, PROMPT:].tolist()

    tokens = generate()
    torch.cuda.synchronize()
    used_before = nvml.used(0) if nvml else None

    # SGLang's release: kv_cache, weights, cuda_graph.
    tms.pause("kv_cache")
    tms.pause("weights")
    tms.pause("cuda_graph")
    used_paused = nvml.used(0) if nvml else None
    tms.pause("kv_cache")   # twice: nothing more, no exit

    other = torch.randn(256 * MiB // 4, device=dev)   # something else while paused
    other_sum = float(other.sum().item())
    with tms.region(tag="kv_cache"):
        late = torch.full((64 * MiB // 4,), 5.0, device=dev)
    late_ok = bool((late == 5.0).all().item())

    for t in ("cuda_graph", "weights", "kv_cache", "kv_cache"):
        tms.resume(t)
    kv.fill_(3.0)   # without a backup its contents were dropped: SGLang flushes the cache
    tokens_again = generate()
    graph.replay()
    same_graph = bool(torch.equal(g_out, g_ref))
    same_weights = all(torch.equal(p.detach().cpu(), c) for p, c in zip(params, cpu_copy))
    same_ptrs = ptrs == [p.data_ptr() for p in params] + [kv.data_ptr()]
    return {"tokens": tokens, "tokens_again": tokens_again, "same_weights": same_weights, "same_graph": same_graph,
            "same_ptrs": same_ptrs, "late_ok": late_ok and bool((late == 5.0).all().item()),
            "other_ok": float(other.sum().item()) == other_sum, "weight_bytes": weight_bytes, "kv_bytes": KV_BYTES,
            "used_before": used_before, "used_paused": used_paused, "nvml_missing": missing}


HANDLERS = {"sglang": child_sglang}


def mib(v):
    return "n/a" if v is None else "%.0f MiB" % (v / MiB)


def case_sglang_pattern():
    got = gt.run_child(__file__, "sglang", {}, shim=True, env={}, label="SGLang's release and resume (shim)")
    r = got.result
    print("  generated %s" % r["tokens"])
    print("  again     %s" % r["tokens_again"])
    paused = r["weight_bytes"] + r["kv_bytes"]
    print("  weights %s, kv_cache %s; NVML %s before the pause, %s paused (%s)"
          % (mib(r["weight_bytes"]), mib(r["kv_bytes"]), mib(r["used_before"]), mib(r["used_paused"]),
             r["nvml_missing"] or "NVML lists the process"))
    gt.expect(r["tokens"] == r["tokens_again"], "the tokens after resume differ from those before the pause")
    gt.expect(r["same_weights"], "the weights after resume differ from their copy")
    gt.expect(r["same_graph"], "the graph's replay after resume differs from its first output")
    gt.expect(r["same_ptrs"], "a tensor's data_ptr changed over the pause")
    gt.expect(r["late_ok"], "the allocation made inside the paused kv_cache region lost its contents")
    gt.expect(r["other_ok"], "the allocation made while paused changed")
    if r["used_before"] is not None:
        drop = r["used_before"] - r["used_paused"]
        print("  NVML dropped %s of the %s paused (%.0f %%)" % (mib(drop), mib(paused), 100.0 * drop / paused))
        gt.expect(drop >= 0.9 * paused, "NVML: the process dropped %s on the pause; the paused tags hold %s"
                  % (mib(drop), mib(paused)))
    st = got.stats
    gt.expect(st["migrations_failed"] == 0, "%d migrations failed" % st["migrations_failed"])


def main():
    return gt.suite_main("torch-memory-saver", "torch", HANDLERS, [("sglang_pattern", case_sglang_pattern)])


if __name__ == "__main__":
    sys.exit(main())
