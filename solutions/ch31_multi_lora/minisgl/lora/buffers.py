"""The engine's side of LoRA: the stacked A/B buffers every adapted linear layer reads, and the batch's slots.

Memory is fixed at start: `max_loras_per_batch` slots, each as large as an adapter of `max_lora_rank` on every
target module, so loading an adapter is a copy into a slot (zero-padded to the maximum rank) and never allocates.
Which adapter sits in which slot is the scheduler's decision (lora/manager.py). A batch's slot index per token lives
in one static buffer: a CUDA graph captured for a decode batch reads it, and each replay only rewrites it.
"""

from __future__ import annotations

import numpy as np
import torch

from minisgl.core import Batch
from minisgl.lora.adapter import LoraAdapter
from minisgl.lora.delta import LoraTarget, StackedLoraTarget


class LoraBuffers:
    def __init__(self, model, num_slots: int, max_rank: int, targets: tuple[str, ...], dtype: torch.dtype,
                 device: torch.device, static_rows: int) -> None:
        self.num_slots, self.max_rank, self.targets = num_slots, max_rank, targets
        self.dtype, self.device = dtype, device
        self.scaling = torch.zeros(num_slots, dtype=torch.float32, device=device)
        self.weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}  # (layer, module) -> A, B
        self.num_layers = len(model.model.layers)
        for i, layer in enumerate(model.model.layers):
            attn, mlp = layer.self_attn, layer.mlp
            qkv = attn.qkv_proj
            q, kv = qkv.q_size, qkv.kv_size
            self._attach(i, qkv, [("q_proj", 0, q), ("k_proj", q, q + kv), ("v_proj", q + kv, q + 2 * kv)])
            self._attach(i, attn.o_proj, [("o_proj", 0, attn.o_proj.weight.shape[0])])
            if {"gate_proj", "up_proj", "down_proj"} & set(targets):
                if not hasattr(mlp, "gate_up_proj") or not hasattr(mlp.gate_up_proj, "out_features_list"):
                    raise ValueError("lora_target_modules: the MLP of this model (mixture of experts) takes no "
                                     "LoRA here; target q, k, v, o only")
                inter = mlp.gate_up_proj.out_features_list[0]
                self._attach(i, mlp.gate_up_proj, [("gate_proj", 0, inter), ("up_proj", inter, 2 * inter)])
                self._attach(i, mlp.down_proj, [("down_proj", 0, mlp.down_proj.weight.shape[0])])
        # One slot index per token of the batch (-1: no adapter). Rows past the batch stay -1: the padding rows
        # of a CUDA graph replay take no adapter.
        self.static_slots = torch.full((max(static_rows, 1),), -1, dtype=torch.int32, device=device)

    def _attach(self, layer_id: int, linear, parts: list[tuple[str, int, int]]) -> None:
        kept = [p for p in parts if p[0] in self.targets]
        if not kept:
            return
        out_features, in_features = linear.weight.shape
        if self.device.type == "cuda":  # the parts' A and B stacked, so the kernels take them in one launch
            a_all = torch.zeros(self.num_slots, len(kept) * self.max_rank, in_features, dtype=self.dtype,
                                device=self.device)
            b_all = torch.zeros(self.num_slots, out_features, self.max_rank, dtype=self.dtype, device=self.device)
            linear._lora = StackedLoraTarget(kept, a_all, b_all, self.scaling)
        else:
            a = [torch.zeros(self.num_slots, self.max_rank, in_features, dtype=self.dtype, device=self.device)
                 for _ in kept]
            b = [torch.zeros(self.num_slots, end - start, self.max_rank, dtype=self.dtype, device=self.device)
                 for _, start, end in kept]
            linear._lora = LoraTarget(kept, a, b, self.scaling)
        a, b = linear._lora.a, linear._lora.b
        for (name, _, _), ai, bi in zip(kept, a, b):
            self.weights[(layer_id, name)] = (ai, bi)

    def check(self, adapter: LoraAdapter) -> None:
        """ValueError naming the limit an adapter breaks (its rank, a module not targeted, a shape)."""
        if adapter.rank > self.max_rank:
            raise ValueError(f"adapter {adapter.name!r} has rank {adapter.rank}, above max_lora_rank {self.max_rank}")
        extra = [m for m in adapter.targets if m not in self.targets]
        if extra:
            raise ValueError(f"adapter {adapter.name!r} targets {extra}, not in lora_target_modules "
                             f"{list(self.targets)}")
        for (layer, module), (a, b) in adapter.weights.items():
            if (layer, module) not in self.weights:
                raise ValueError(f"adapter {adapter.name!r}: layer {layer} is not in this model "
                                 f"({self.num_layers} layers)")
            ba, bb = self.weights[(layer, module)]
            if a.shape[1] != ba.shape[2] or b.shape[0] != bb.shape[1]:
                raise ValueError(f"adapter {adapter.name!r}: layer {layer} {module}: A {tuple(a.shape)} / "
                                 f"B {tuple(b.shape)} do not fit this model's {module} "
                                 f"({bb.shape[1]} x {ba.shape[2]})")

    def load(self, slot: int, adapter: LoraAdapter | None) -> None:
        """Copy an adapter into a slot, zero-padded to max_rank (None: empty the slot)."""
        for a, b in self.weights.values():
            a[slot].zero_()
            b[slot].zero_()
        self.scaling[slot] = 0.0 if adapter is None else adapter.scaling
        if adapter is None:
            return
        for where, (a, b) in adapter.weights.items():
            ba, bb = self.weights[where]
            ba[slot, : adapter.rank].copy_(a.to(self.dtype), non_blocking=True)
            bb[slot, :, : adapter.rank].copy_(b.to(self.dtype), non_blocking=True)

    def token_slots(self, batch: Batch) -> torch.Tensor | None:
        """The slot of every token of a prepared batch, in the order of its flattened tokens (a request's extend
        tokens one after another). Written into the static buffer when it fits (the rest set to -1), so a
        replayed CUDA graph reads it; a larger prefill gets a tensor of its own. None (the layers skip LoRA) when
        no request has an adapter, except on a GPU, where a captured graph runs the LoRA kernels anyway."""
        per_req = np.fromiter((r.lora_slot for r in batch.reqs), dtype=np.int32, count=batch.size)
        if self.device.type != "cuda" and (per_req < 0).all():
            return None
        lengths = np.fromiter((r.extend_len for r in batch.reqs), dtype=np.int64, count=batch.size)
        host = torch.from_numpy(np.repeat(per_req, lengths))
        if len(host) > len(self.static_slots):
            return host.to(self.device, non_blocking=True)
        self.static_slots.fill_(-1)
        self.static_slots[: len(host)].copy_(host, non_blocking=True)
        return self.static_slots
