"""Building blocks shared by the Llama-family models: gated MLP and rotary attention."""

from __future__ import annotations

import torch

from minisgl.distributed import get_tp_info, split_heads
from minisgl.kernel.triton import use_triton
from minisgl.layers.activation import SiluAndMul
from minisgl.layers.attention import AttentionLayer
from minisgl.layers.base import BaseOP
from minisgl.layers.linear import LinearColParallelMerged, LinearOProj, LinearQKVMerged, LinearRowParallel
from minisgl.layers.norm import RMSNorm
from minisgl.layers.rotary import RotaryEmbedding
from minisgl.models.config import ModelConfig


class GatedMLP(BaseOP):
    """down(silu(gate(x)) * up(x)), with gate and up merged into one matmul."""

    def __init__(self, config: ModelConfig) -> None:
        size = config.intermediate_size
        self.gate_up_proj = LinearColParallelMerged(config.hidden_size, [size, size])
        self.act = SiluAndMul()
        self.down_proj = LinearRowParallel(size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_up_proj(x)))


class RopeAttn(BaseOP):
    """Self-attention with rotary embeddings; Qwen3 also RMS-normalises each q and k head (qk_norm)."""

    def __init__(self, config: ModelConfig, layer_id: int, rotary: RotaryEmbedding, qk_norm: bool) -> None:
        # This rank's heads (all of them with one rank): the layers below are sized for them.
        self.num_qo_heads, self.num_kv_heads = split_heads(config.num_qo_heads, config.num_kv_heads,
                                                           get_tp_info().size)
        self.head_dim = config.head_dim
        self.qkv_proj = LinearQKVMerged(config.hidden_size, config.head_dim, config.num_qo_heads,
                                        config.num_kv_heads, bias=config.attention_bias)
        self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps) if qk_norm else None
        self._rotary = rotary  # shared by all layers, so private: it has no weights
        self.attn = AttentionLayer(self.num_qo_heads, self.num_kv_heads, config.head_dim, layer_id)
        self.o_proj = LinearOProj(config.num_qo_heads * config.head_dim, config.hidden_size)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: [tokens, hidden] -> [tokens, hidden]."""
        q, k, v = self.qkv_proj(x)
        q = q.view(-1, self.num_qo_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if use_triton(q):  # chapter 19: the q/k norms and RoPE in one kernel, in place in the QKV output
            q, k = self._fused_norm_rope(q, k, positions)
        else:
            if self.q_norm is not None:
                q, k = self.q_norm(q), self.k_norm(k)
            q, k = self._rotary(positions, q, k)
        out = self.attn(q, k, v)
        return self.o_proj(out.reshape(-1, self.num_qo_heads * self.head_dim))

    def _fused_norm_rope(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor):
        from minisgl.kernel.triton.rope import qk_norm_rope  # imports triton: only when the kernels are wanted

        cos, sin = self._rotary.tables(positions.device)
        if self.q_norm is None:
            return qk_norm_rope(q, k, positions, cos, sin)
        return qk_norm_rope(q, k, positions, cos, sin, self.q_norm.weight, self.k_norm.weight, self.q_norm.eps)
