"""Chapter 19 example: the fused Triton kernels (KV store, residual add + RMSNorm) against the torch ops they
replace, their speed on a GPU, and the engine generating with the fused kernels on and off. On a CPU the
kernels run in Triton's interpreter (TRITON_INTERPRET=1): right, slow, and no measure of speed. Where Triton is
missing (it has wheels for Linux only) the example says so and runs the engine on the torch ops alone."""

import dataclasses
import os

import torch

ON_CUDA = torch.cuda.is_available()
if not ON_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

from minisgl import env  # noqa: E402
from minisgl.core import SamplingParams  # noqa: E402
from minisgl.kernel import torch_ops  # noqa: E402
from minisgl.llm import LLM  # noqa: E402
from tools.models import model_path_from_env  # noqa: E402
from tools.optional import missing  # noqa: E402

device = torch.device("cuda" if ON_CUDA else "cpu")
dtype = torch.bfloat16 if ON_CUDA else torch.float32


def set_fused(mode: str) -> None:
    # ENV is read once from the environment at import; replacing it is how one process tries both settings.
    env.ENV = dataclasses.replace(env.ENV, FUSED_KERNELS=mode)


def torch_store(k, v, k_cache, v_cache, out_loc):
    k_cache[out_loc] = k.view(-1, 8, 128).to(k_cache.dtype)
    v_cache[out_loc] = v.view(-1, 8, 128).to(v_cache.dtype)


def kernels_vs_torch_ops() -> None:
    """A decode step of the Qwen3-0.6B shape: hidden 1024, 8 KV heads of 128 (a 1024-wide KV row); 256 tokens on
    a GPU, 32 on a CPU (the interpreter runs one program after the other)."""
    from minisgl.kernel.triton.norm import fused_add_rms_norm
    from minisgl.kernel.triton.store import store_kv

    tokens, hidden, slots = (256, 1024, 65536) if ON_CUDA else (32, 1024, 4096)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, hidden, generator=gen).to(device, dtype)
    residual = torch.randn(tokens, hidden, generator=gen).to(device, dtype)
    weight = (1 + 0.1 * torch.randn(hidden, generator=gen)).to(device, dtype)
    k, v = torch.randn(2, tokens, 8 * 128, generator=gen).to(device, dtype)
    out_loc = torch.randperm(slots, generator=gen)[:tokens].to(device)
    k_cache = torch.zeros(slots, 8, 128, dtype=dtype, device=device)
    v_cache = torch.zeros_like(k_cache)

    normed, summed = fused_add_rms_norm(x, residual, weight, 1e-6)
    ref_normed, ref_summed = torch_ops.fused_add_rms_norm(x, residual, weight, 1e-6)
    store_kv(k, v, k_cache, v_cache, out_loc)
    ref_k, ref_v = torch.zeros_like(k_cache), torch.zeros_like(v_cache)
    torch_store(k, v, ref_k, ref_v, out_loc)
    print(f"{tokens} tokens, hidden {hidden}, {dtype} on {device}")
    print(f"  residual add + RMSNorm: max abs err of the sum {(summed - ref_summed).abs().max().item():.1e}, "
          f"of the norm {(normed.float() - ref_normed.float()).abs().max().item():.1e}")
    err = max((k_cache - ref_k).abs().max().item(), (v_cache - ref_v).abs().max().item())
    print(f"  KV store: max abs err {err:.1e}")

    if ON_CUDA:
        def time_us(fn, *args, iters=200):
            for _ in range(10):
                fn(*args)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn(*args)
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) * 1000 / iters

        cases = [("residual add + RMSNorm", torch_ops.fused_add_rms_norm, fused_add_rms_norm,
                  (x, residual, weight, 1e-6)),
                 ("KV store", torch_store, store_kv, (k, v, k_cache, v_cache, out_loc))]
        for name, unfused, fused, args in cases:
            t_torch, t_fused = time_us(unfused, *args), time_us(fused, *args)
            print(f"  {name:>22}: torch ops {t_torch:6.1f} us, fused {t_fused:6.1f} us ({t_torch / t_fused:.1f}x)")
    else:
        print("  timing needs a GPU: the interpreter says nothing about speed")


triton_missing = missing("triton")
if triton_missing:
    print(f"the fused kernels do not run here: {triton_missing}")
else:
    kernels_vs_torch_ops()

# The engine with the fused kernels on and off: float32, so the only differences are float32 rounding.
path = model_path_from_env("smollm2" if ON_CUDA else "tiny-qwen3")
prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14], [15, 16, 17, 18, 19]]
results = {}
for mode in ("off",) if triton_missing else ("on", "off"):
    set_fused(mode)
    llm = LLM(path, device=device.type, dtype="float32", page_size=4, max_running_reqs=3, max_seq_len=128,
              max_extend_tokens=16)
    results[mode] = [o["token_ids"] for o in llm.generate(prompts, SamplingParams(max_tokens=8, ignore_eos=True))]
    llm.scheduler.check_integrity()
    print(f"  fused kernels {mode:>3}: {results[mode][0]}")
if triton_missing:
    raise SystemExit(0)
print(f"same tokens with the fused kernels on and off: {results['on'] == results['off']}")
raise SystemExit(0 if results["on"] == results["off"] else 1)
