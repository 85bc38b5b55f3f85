"""Load Hugging Face safetensors into the engine's layers, merging q/k/v and gate/up on the way, and (chapter 20)
stacking the experts of a mixture-of-experts layer into one tensor per projection."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import torch
from safetensors import safe_open

from minisgl.distributed import DistributedInfo, kv_head_of_rank, split_heads
from minisgl.models.config import ModelConfig

# checkpoint name suffix -> (merged name suffix, position in the merged weight, number of parts)
MERGED = {
    "q_proj": ("qkv_proj", 0, 3),
    "k_proj": ("qkv_proj", 1, 3),
    "v_proj": ("qkv_proj", 2, 3),
    "gate_proj": ("gate_up_proj", 0, 2),
    "up_proj": ("gate_up_proj", 1, 2),
}


def iter_safetensors(model_path: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name, tensor) one at a time. safetensors maps the file into memory and reads a tensor only when
    asked, so a consumer that places each tensor as it arrives never holds a second copy of the checkpoint."""
    files = sorted(Path(model_path).glob("*.safetensors"))
    if not files:
        raise ValueError(f"no *.safetensors files in {model_path}")
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def merge_weights(tensors: Iterator[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """Rename and merge: `...self_attn.q_proj.weight` + k + v become `...self_attn.qkv_proj.weight`.

    Parts of a merged weight may arrive in any order (and in different files): hold them until all are
    there, then concatenate in the fixed order along dim 0 (output rows).
    """
    pending: dict[str, list[torch.Tensor | None]] = {}
    for name, tensor in tensors:
        parts = name.split(".")
        module = parts[-2] if len(parts) >= 2 else ""
        if module not in MERGED:
            yield name, tensor
            continue
        merged_module, index, count = MERGED[module]
        merged_name = ".".join(parts[:-2] + [merged_module, parts[-1]])
        slots = pending.setdefault(merged_name, [None] * count)
        slots[index] = tensor
        if all(s is not None for s in slots):
            yield merged_name, torch.cat(slots, dim=0)
            del pending[merged_name]
    if pending:
        raise ValueError(f"checkpoint is missing parts of merged weights: {sorted(pending)}")


# How each checkpoint tensor is cut under tensor parallelism: module name -> the dimension split by rank.
COLUMN_PARALLEL = ("q_proj", "gate_proj", "up_proj", "embed_tokens", "lm_head")  # output rows (dim 0)
ROW_PARALLEL = ("o_proj", "down_proj")  # input columns (dim 1)
KV_PROJ = ("k_proj", "v_proj")  # output rows by KV head, replicated when there are fewer heads than ranks


def shard_weight(name: str, tensor: torch.Tensor, config: ModelConfig, tp: DistributedInfo) -> torch.Tensor:
    """This rank's slice of one checkpoint tensor (named as in the checkpoint, before q/k/v are merged).

    Embedding and LM-head rows are padded with zeros to a multiple of tp.size first (VocabParallelEmbedding).
    Everything else (the norms) is replicated whole.
    """
    if tp.size == 1:
        return tensor
    module = name.split(".")[-2] if "." in name else name
    if module in KV_PROJ:
        _, local_kv = split_heads(config.num_qo_heads, config.num_kv_heads, tp.size)
        first = kv_head_of_rank(config.num_kv_heads, tp.rank, tp.size)
        rows = local_kv * config.head_dim
        return tensor[first * config.head_dim : first * config.head_dim + rows].contiguous()
    if module in ("embed_tokens", "lm_head"):
        padding = -tensor.shape[0] % tp.size
        tensor = torch.cat([tensor, tensor.new_zeros(padding, *tensor.shape[1:])])
    if module in COLUMN_PARALLEL:
        return tensor.chunk(tp.size, dim=0)[tp.rank].contiguous()
    if module in ROW_PARALLEL:
        return tensor.chunk(tp.size, dim=1)[tp.rank].contiguous()
    return tensor


# `model.layers.3.mlp.experts.17.gate_up_proj.weight` (merged by merge_weights) -> prefix, expert, projection
EXPERT_WEIGHT = re.compile(r"^(?P<prefix>.+\.experts)\.(?P<expert>\d+)\.(?P<proj>gate_up_proj|down_proj)\.weight$")


def stack_expert_weights(tensors: Iterator[tuple[str, torch.Tensor]],
                         num_experts: int) -> Iterator[tuple[str, torch.Tensor]]:
    """Stack one weight per expert into one tensor: `...experts.{e}.gate_up_proj.weight` for e = 0..E-1 becomes
    `...experts.gate_up_proj` [E, rows, cols] with expert e at index e (down_proj likewise). Other names pass.

    Experts may arrive in any order and across files: hold a layer's projection until all E are there. A
    missing expert, or an expert number >= num_experts, is a ValueError naming it.
    """
    # TODO(ch20): match each name against EXPERT_WEIGHT; yield the others unchanged. Keep the matching tensors
    # in slots indexed by expert number, per stacked name (prefix + "." + proj); refuse an expert number out of
    # range. Once every slot of a name is filled, yield (name, torch.stack(slots)) and forget it. At the end,
    # anything still pending is a checkpoint with missing experts: ValueError.
    raise NotImplementedError("TODO(ch20): stack_expert_weights")


def load_hf_weight(model_path: str | Path, tie_word_embeddings: bool, config: ModelConfig | None = None,
                   tp: DistributedInfo | None = None) -> dict[str, torch.Tensor]:
    """The merged state dict; with `config` and `tp`, only rank tp.rank's slices (cut before merging)."""
    tensors = iter_safetensors(model_path)
    if tp is not None and tp.size > 1:
        tensors = ((name, shard_weight(name, t, config, tp)) for name, t in tensors)
    merged = merge_weights(tensors)
    if config is not None and config.num_experts:
        merged = stack_expert_weights(merged, config.num_experts)
    state = dict(merged)
    if tie_word_embeddings:
        state.pop("lm_head.weight", None)  # the head reads the embedding's weight
    return state
