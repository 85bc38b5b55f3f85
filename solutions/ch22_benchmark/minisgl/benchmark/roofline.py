"""The roofline floor: the least time a batch can take, from the bytes it must read and the FLOPs it must do.

A forward pass has to read every weight once (bytes W) and, for attention, the keys and values of every
token in the context of every request in the batch (bytes K per token: 2 for K and V x layers x KV heads x
head_dim x bytes per number). It also does about 2 x params FLOPs per new token (one multiply and one add
per weight). With B the memory bandwidth and F the peak FLOP rate, no implementation beats

    t_step >= max( (W + K * sum of context lengths) / B ,  2 * params * new tokens / F ).

A decode step of a few hundred requests is far on the memory side (one new token per request, and every
context read in full); a prefill batch of thousands of prompt tokens is on the compute side. The floor of a
workload adds up its batches. The one used for every system here is the *ideal* schedule: one prefill
batch of all the prompts, then decode steps in which every request that still has tokens to generate takes
part. It depends only on the workload, so every system (ours, Hugging Face's) is measured against the same
number; it is a floor for any schedule that runs prefill and decode in separate batches, since the KV bytes
and FLOPs are the same in every such schedule and no schedule has fewer decode steps than the longest
output. `schedule_floor` also prices the batches a run actually made (recorded through `on_batch`), which
tells how far each of *our* steps is from its own floor.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from minisgl.benchmark.workload import Workload
from minisgl.models.config import ModelConfig

Step = tuple[list[int], int]  # (context length of every request in the batch, new tokens computed)

# Dense bf16 tensor-core peaks from NVIDIA's spec sheets (the sheets' larger figures assume 2:4 sparsity).
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12}
# Nominal memory bandwidths, for comparison with the measured copy bandwidth.
NOMINAL_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12}


def nominal(table: dict[str, float], device_name: str) -> float | None:
    """The table's figure for a GPU whose name contains one of its keys ("NVIDIA H200" -> "H200")."""
    return next((v for k, v in table.items() if k in device_name), None)


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """numel x itemsize summed over distinct tensors: a tied weight (embedding = lm_head) counts once."""
    seen, total = set(), 0
    for t in tensors:
        key = (t.data_ptr(), t.numel(), t.dtype)
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


def model_weight_bytes(model) -> int:
    """The weight bytes of a loaded engine model (or any module with a state_dict)."""
    return tensor_bytes(model.state_dict().values())


def config_param_count(mc: ModelConfig) -> int:
    """Parameters of a Qwen3 or Llama model, from its config alone (what a decode step reads)."""
    h, d, layers = mc.hidden_size, mc.head_dim, mc.num_layers
    q, kv = mc.num_qo_heads * d, mc.num_kv_heads * d
    attn = h * q + 2 * h * kv + q * h  # q, k, v and o projections
    if mc.attention_bias:
        attn += q + 2 * kv + h
    if "Qwen3" in mc.architecture:
        attn += 2 * d  # q_norm and k_norm
    mlp = 3 * h * mc.intermediate_size  # gate, up, down
    per_layer = attn + mlp + 2 * h  # and the two RMSNorms
    embed = mc.vocab_size * h * (1 if mc.tie_word_embeddings else 2)
    return embed + layers * per_layer + h  # and the final norm


def kv_bytes_per_token(mc: ModelConfig, dtype_bytes: int) -> int:
    """K and V of one token over all layers."""
    return 2 * mc.num_layers * mc.num_kv_heads * mc.head_dim * dtype_bytes


def decode_step_bytes(weight_bytes: int, kv_per_token: int, context_lens: list[int]) -> int:
    """Bytes one forward pass must read: every weight once, and the KV of every context token of every request."""
    if weight_bytes < 0 or kv_per_token < 0:
        raise ValueError("byte counts must be >= 0")
    if any(n < 0 for n in context_lens):
        raise ValueError(f"context lengths must be >= 0, got {min(context_lens)}")
    # TODO(ch22): the weights once, plus kv_per_token for every token of every context.
    # >>> solution
    return weight_bytes + kv_per_token * sum(context_lens)
    # <<< solution


def ideal_schedule(workload: Workload) -> list[Step]:
    """One prefill batch of every prompt, then the decode steps when every unfinished request decodes."""
    if not workload or any(len(p) < 1 or n < 1 for p, n in workload):
        raise ValueError("a workload needs requests with at least one prompt token and one output token")
    # TODO(ch22): first (prompt lengths, their sum): the prefill, which also makes every first token. Then
    # decode step k = 1, 2, ..., max(n) - 1: the requests with n > k take part, with context prompt_len + k,
    # one new token each, i.e. ([prompt_len + k for those], how many they are).
    # >>> solution
    steps: list[Step] = [([len(p) for p, _ in workload], sum(len(p) for p, _ in workload))]
    for k in range(1, max(n for _, n in workload)):
        ctx = [len(p) + k for p, n in workload if n > k]
        steps.append((ctx, len(ctx)))
    return steps
    # <<< solution


def schedule_floor(steps: list[Step], weight_bytes: int, kv_per_token: int, params: int, bandwidth: float,
                   peak_flops: float) -> dict:
    """The roofline floor of a list of batches: each takes at least max(bytes / bandwidth, FLOPs / peak)."""
    if bandwidth <= 0 or peak_flops <= 0:
        raise ValueError(f"bandwidth and peak FLOPs must be > 0, got {bandwidth} and {peak_flops}")
    memory = compute = floor = 0.0
    for contexts, new_tokens in steps:
        t_mem = decode_step_bytes(weight_bytes, kv_per_token, contexts) / bandwidth
        t_flop = 2 * params * new_tokens / peak_flops
        memory, compute, floor = memory + t_mem, compute + t_flop, floor + max(t_mem, t_flop)
    return {"steps": len(steps), "memory_s": memory, "compute_s": compute, "floor_s": floor}


def workload_floor(workload: Workload, weight_bytes: int, kv_per_token: int, params: int, bandwidth: float,
                   peak_flops: float) -> dict:
    """The floor of the ideal schedule, and the output tokens/s it would mean."""
    out = schedule_floor(ideal_schedule(workload), weight_bytes, kv_per_token, params, bandwidth, peak_flops)
    out["floor_tok_s"] = sum(n for _, n in workload) / out["floor_s"]
    out.update(weight_bytes=weight_bytes, kv_bytes_per_token=kv_per_token, params=params,
               bandwidth_gbs=bandwidth / 1e9, peak_tflops=peak_flops / 1e12)
    return out
