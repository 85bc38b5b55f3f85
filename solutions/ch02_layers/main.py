"""Chapter 2 example: the layers' math against Hugging Face's, and what Llama 3 scaling does to RoPE."""

import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

from minisgl.kernel.torch_ops import rms_norm
from minisgl.layers.rotary import RotaryEmbedding, default_inv_freq, llama3_inv_freq

g = torch.Generator().manual_seed(0)


def rel(a, b):
    return float((a.detach().double() - b.detach().double()).norm() / b.detach().double().norm())


x = torch.randn(8, 576, generator=g)
hf_norm = Qwen3RMSNorm(576, eps=1e-5)
hf_norm.weight.data = torch.randn(576, generator=g)
print(f"RMSNorm    relative difference to HF: {rel(rms_norm(x, hf_norm.weight.data, 1e-5), hf_norm(x)):.1e}")

rope = RotaryEmbedding(head_dim=64, max_position=2048, base=100000.0)
positions = torch.arange(0, 2048, 256)
q, k = torch.randn(len(positions), 9, 64, generator=g), torch.randn(len(positions), 3, 64, generator=g)
angles = torch.outer(positions.float(), default_inv_freq(64, 100000.0))
emb = torch.cat([angles, angles], -1)
hf_q, _ = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], emb.cos()[None], emb.sin()[None])
print(f"RoPE       relative difference to HF: {rel(rope(positions, q, k)[0], hf_q[0].transpose(0, 1)):.1e}")

print("\nRoPE is relative: the score of q at position m and k at position n depends only on m - n")
qv, kv = torch.randn(1, 1, 64, generator=g), torch.randn(1, 1, 64, generator=g)
for m, n in [(10, 4), (500, 494), (1900, 1894)]:
    qm, _ = rope(torch.tensor([m]), qv, qv)
    _, kn = rope(torch.tensor([n]), kv, kv)
    print(f"  m={m:<5} n={n:<5} q.k = {float((qm * kn).sum()):+.6f}")

scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}
base = default_inv_freq(128, 500000.0)
scaled = llama3_inv_freq(base, scaling)
ratio = base / scaled
print("\nLlama 3.1 scaling (head_dim 128, theta 5e5): how much each frequency is slowed down")
print(f"  kept (ratio 1): {(ratio < 1.0001).sum().item()}   blended: {((ratio > 1.0001) & (ratio < 7.999)).sum().item()}"
      f"   divided by 8: {(ratio > 7.999).sum().item()}   of {len(ratio)} frequencies")
