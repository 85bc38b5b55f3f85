"""Chapter 17 example: the Triton paged-attention kernels against the torch backend, the backend `auto`
picks on this machine, and the engine generating on the Triton backend. On a CPU the kernels run in
Triton's interpreter (TRITON_INTERPRET=1): correct, slow, and enough to develop them without a GPU. Where Triton
is missing (it has wheels for Linux only) the example says so and runs the torch backend alone."""

import os
import time

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

from minisgl.attention import resolve_backend  # noqa: E402
from minisgl.core import SamplingParams  # noqa: E402
from minisgl.llm import LLM  # noqa: E402
from tools.models import model_path_from_env  # noqa: E402
from tools.optional import missing  # noqa: E402

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
print(f"device {device}; `auto` picks the {resolve_backend('auto', device, dtype, 256)!r} backend for {dtype} "
      f"with pages of 256, {resolve_backend('auto', device, dtype, 1)!r} with pages of 1")


def decode_kernel_vs_float64() -> None:
    """One decode step of 8 requests, 9 query heads sharing 3 KV heads (SmolLM2's shape), against float64."""
    from minisgl.kernel.triton.attention import paged_decode_attention

    gen = torch.Generator().manual_seed(0)
    lens = [17, 200, 64, 1, 90, 33, 128, 5]
    k_cache = torch.randn(sum(lens), 3, 64, generator=gen).to(device, dtype)
    v_cache = torch.randn(sum(lens), 3, 64, generator=gen).to(device, dtype)
    table = torch.zeros(len(lens), max(lens), dtype=torch.int32)
    slots = torch.randperm(sum(lens), generator=gen).to(torch.int32)
    start = 0
    for row, n in enumerate(lens):
        table[row, :n] = slots[start : start + n]
        start += n
    table = table.to(device)
    q = torch.randn(len(lens), 9, 64, generator=gen).to(device, dtype)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    out = paged_decode_attention(q, k_cache, v_cache, table, torch.arange(len(lens), dtype=torch.int32, device=device),
                                 seq_lens, 64 ** -0.5)
    ref = []
    for i, n in enumerate(lens):
        k = k_cache[table[i, :n].long()].double().repeat_interleave(3, 1)
        v = v_cache[table[i, :n].long()].double().repeat_interleave(3, 1)
        p = (torch.einsum("hd,khd->hk", q[i].double(), k) * 64 ** -0.5).softmax(-1)
        ref.append(torch.einsum("hk,khd->hd", p, v))
    ref = torch.stack(ref)
    print(f"decode kernel vs float64: relative error {((out.double() - ref).norm() / ref.norm()).item():.1e}")


triton_missing = missing("triton")
if triton_missing:
    print(f"the Triton kernels and backend do not run here: {triton_missing}")
else:
    decode_kernel_vs_float64()

path = model_path_from_env("tiny-llama")
prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14], [15, 16, 17, 18, 19]]
params = SamplingParams(max_tokens=8, ignore_eos=True)
results = {}
backends = ("torch",) if triton_missing else ("torch", "triton")
for backend in backends:
    llm = LLM(path, device=device.type, dtype="float32", attention_backend=backend, page_size=4, max_running_reqs=3,
              max_seq_len=128, max_extend_tokens=8)
    t0 = time.perf_counter()
    results[backend] = [o["token_ids"] for o in llm.generate(prompts, params)]
    print(f"  {backend:>6} backend: {results[backend][0]}  ({time.perf_counter() - t0:.2f} s)")
    llm.scheduler.check_integrity()
if triton_missing:
    raise SystemExit(0)
print(f"same tokens on both backends: {results['torch'] == results['triton']}")
raise SystemExit(0 if results["torch"] == results["triton"] else 1)
