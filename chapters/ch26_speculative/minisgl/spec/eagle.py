"""EAGLE-style drafting: a one-layer head over the target's own hidden states guesses the next tokens.

A draft model reads tokens only and must rebuild, in its own layers, what the target already knows. EAGLE (Li et
al. 2024) reads the target's last hidden state instead: at position p the target computed feature f_p (the vector
its LM head turns into logits for token p + 1). The head takes the pair (f_p, embedding of token p + 1), mixes the
two with one linear layer and one decoder layer, and predicts f_(p+1); the target's own final norm and LM head
(shared, frozen; only the rows of a trimmed draft vocabulary) turn that into a guess of token p + 2. The predicted
feature is the input of the next guess, so k guesses cost k passes of one layer over a short window.

The head's decoder layer is shaped like one of the target's (its hidden size, heads, MLP) but is a trainable
torch module: `make draft` trains it by self-distillation (tools/eagle.py) and saves its weights with the ids of
its draft vocabulary. The target's features come from a tap on its model body (FeatureTap): every forward pass
writes each computed position's feature into a small ring per table row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from minisgl.core import Req
from minisgl.engine.engine import Engine
from minisgl.models import ModelConfig
from minisgl.spec.config import SpecConfig
from minisgl.spec.proposer import Proposer

HEAD_CONFIG = "eagle.json"
HEAD_WEIGHTS = "eagle.safetensors"


@dataclass(frozen=True)
class HeadConfig:
    """The head's shape (the target's layer dimensions), its draft vocabulary size and its attention window."""

    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_base: float
    rms_norm_eps: float
    vocab_size: int  # the target's
    draft_vocab_size: int  # the trimmed vocabulary the head guesses from
    window: int = 16  # target features each guess attends to (EAGLE attends to all: a KV cache of its own)

    @classmethod
    def for_target(cls, mc: ModelConfig, draft_vocab_size: int, window: int = 16) -> HeadConfig:
        return cls(mc.hidden_size, mc.intermediate_size, mc.num_qo_heads, mc.num_kv_heads, mc.head_dim,
                   mc.rotary.base, mc.rms_norm_eps, mc.vocab_size, draft_vocab_size, window)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    wide = x.to(torch.promote_types(x.dtype, torch.float32))  # half precision squares in float32
    return (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def rotate(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """RoPE (rotate-half) on x [B, heads, L, head_dim] at positions [B, L]."""
    half = x.shape[-1] // 2
    inv_freq = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions.float()[:, None, :, None] * inv_freq
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class HeadLayer(nn.Module):
    """A Llama-shaped pre-norm decoder layer (attention + gated MLP), attention masked by the caller."""

    def __init__(self, c: HeadConfig) -> None:
        super().__init__()
        self.c = c
        h, q, kv = c.hidden_size, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        self.input_norm = nn.Parameter(torch.ones(h))
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(h, q, bias=False), nn.Linear(h, kv, bias=False), \
            nn.Linear(h, kv, bias=False)
        self.o_proj = nn.Linear(q, h, bias=False)
        self.post_norm = nn.Parameter(torch.ones(h))
        self.gate_proj, self.up_proj = nn.Linear(h, c.intermediate_size, bias=False), \
            nn.Linear(h, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, h, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                past: list | None = None) -> torch.Tensor:
        """`past` (make draft's training): the keys and values of earlier calls, which these positions also attend
        to (mask [B, L, earlier + L]); this call's are appended to it."""
        c = self.c
        b, length, _ = x.shape
        y = rms_norm(x, self.input_norm, c.rms_norm_eps)
        q = self.q_proj(y).view(b, length, c.num_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(y).view(b, length, c.num_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(y).view(b, length, c.num_kv_heads, c.head_dim).transpose(1, 2)
        q, k = rotate(q, positions, c.rope_base), rotate(k, positions, c.rope_base)
        if past is not None:
            past.append((k, v))
            k, v = (torch.cat([kv[j] for kv in past], 2) for j in (0, 1))
        groups = c.num_heads // c.num_kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, length, -1))
        y = rms_norm(x, self.post_norm, c.rms_norm_eps)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


def window_mask(valid: torch.Tensor, window: int) -> torch.Tensor:
    """[B, L, L] bool: query i sees key j when j <= i, i - j < window and key j is a real pair (valid [B, L]);
    every query sees itself, so a padding row never has an empty softmax."""
    length = valid.shape[1]
    i = torch.arange(length, device=valid.device)
    causal = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < window)
    return (causal[None] & valid[:, None, :]) | torch.eye(length, dtype=torch.bool, device=valid.device)[None]


class EagleHead(nn.Module):
    """(target features [B, L, H], next tokens [B, L]) -> predicted next features [B, L, H] -> draft logits.

    Trainable: fc and layer. Shared with the target and frozen (buffers, never saved with the head): the token
    embedding, the final norm's weight, the LM head rows of the draft vocabulary; vocab_ids maps a draft-vocabulary
    index back to the target's token id."""

    def __init__(self, c: HeadConfig, embed: torch.Tensor, norm_weight: torch.Tensor, lm_head: torch.Tensor,
                 vocab_ids: torch.Tensor) -> None:
        super().__init__()
        self.c = c
        self.fc = nn.Linear(2 * c.hidden_size, c.hidden_size, bias=False)
        self.layer = HeadLayer(c)
        self.register_buffer("embed", embed.detach(), persistent=False)
        self.register_buffer("norm_weight", norm_weight.detach(), persistent=False)
        self.register_buffer("vocab_ids", vocab_ids.long())
        self.register_buffer("lm_rows", lm_head.detach()[self.vocab_ids], persistent=False)

    def forward(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """Pair p is (f_p, token p + 1); output p is the head's guess of f_(p+1), normed as the target's are."""
        # TODO(ch26): concatenate each pair's feature with the embedding of its token (feature first), map the 2H
        # values to H with self.fc, run self.layer over the sequence (positions, mask), and apply the target's final
        # norm (rms_norm with self.norm_weight, eps self.c.rms_norm_eps): the result is in the space of the target's
        # features, so it can be the next pair's feature and the input of the LM head rows.
        raise NotImplementedError("TODO(ch26): EagleHead.forward")

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary."""
        return hidden @ self.lm_rows.T

    @torch.inference_mode()
    def draft(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor,
              k: int) -> torch.Tensor:
        """k greedy guesses per row [B, k] (target token ids), each from the last pair: the window of known pairs,
        then one pair per guess made (its predicted feature, the guessed token)."""
        guesses = []
        for _ in range(k):
            hidden = self(features, tokens, positions, window_mask(valid, self.c.window + k))[:, -1]
            guess = self.vocab_ids[self.logits(hidden).argmax(dim=-1)]
            guesses.append(guess)
            features = torch.cat([features, hidden[:, None]], dim=1)
            tokens = torch.cat([tokens, guess[:, None]], dim=1)
            positions = torch.cat([positions, positions[:, -1:] + 1], dim=1)
            valid = torch.cat([valid, valid.new_ones(valid.shape[0], 1)], dim=1)
        return torch.stack(guesses, dim=1)

    def save(self, folder: str | Path) -> None:
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / HEAD_CONFIG).write_text(json.dumps(asdict(self.c), indent=2, sort_keys=True) + "\n")
        weights = {k: v.detach().float().contiguous() for k, v in self.state_dict().items()}
        save_file(weights, folder / HEAD_WEIGHTS, metadata={"format": "pt"})


def load_head(folder: str | Path, embed: torch.Tensor, norm_weight: torch.Tensor, lm_head: torch.Tensor,
              dtype: torch.dtype | None = None) -> EagleHead:
    """A saved head over the target's shared tensors (its embedding, final norm weight, LM head weight)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    c = HeadConfig(**json.loads((folder / HEAD_CONFIG).read_text()))
    if (c.vocab_size, c.hidden_size) != tuple(embed.shape):
        raise ValueError(f"the EAGLE head in {folder} was trained for a target of vocabulary {c.vocab_size} and "
                         f"hidden size {c.hidden_size}; this target has {tuple(embed.shape)}")
    weights = load_file(folder / HEAD_WEIGHTS)
    head = EagleHead(c, embed, norm_weight, lm_head, weights["vocab_ids"])
    head.load_state_dict(weights)
    return head.to(dtype=dtype or embed.dtype, device=embed.device).eval()


class FeatureTap:
    """Keeps the target's features: every forward pass of its model body writes the feature of each position it
    computed into a ring per table row (slot = position % size), and the host remembers which request and position
    each slot holds. A slot not overwritten since is valid; positions a prefix hit skipped never were."""

    def __init__(self, target: Engine, size: int) -> None:
        body = getattr(target.model, "model", None)
        if body is None or not hasattr(body, "norm"):
            raise ValueError(f"EAGLE needs a Llama-style model body (model.model with a final norm); "
                             f"{type(target.model).__name__} has none")
        self.size = size
        rows = target.page_table.shape[0]
        self.features = torch.zeros(rows, size, target.model_config.hidden_size, dtype=target.config.torch_dtype,
                                    device=target.device)
        self.owner = np.full((rows, size, 2), -1, dtype=np.int64)  # (uid, position) held by each slot
        self._ctx, self._device = target.ctx, target.device
        inner = body.forward

        def tapped(input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            hidden = inner(input_ids, positions)
            self._record(hidden, positions)
            return hidden

        body.forward = tapped  # an instance attribute: this engine's body only
        self._body, self._inner = body, inner

    def remove(self) -> None:
        """Stop recording: the body forwards as before the tap."""
        self._body.forward = self._inner

    def _record(self, hidden: torch.Tensor, positions: torch.Tensor) -> None:
        reqs = self._ctx.batch.reqs
        rows = np.repeat([r.table_idx for r in reqs], [r.extend_len for r in reqs])
        if len(rows) != hidden.shape[0]:
            return  # a padded batch (CUDA graphs): EagleProposer refuses those engines
        # A request computing more positions than the ring holds (a prefill) keeps its last `size`: two positions
        # for one slot in a single indexed write would leave either one there, not necessarily the later.
        positions = positions.long()
        if any(r.extend_len > self.size for r in reqs):  # a decode or verify step never does: no array built
            keep = np.concatenate([np.arange(r.cached_len, r.device_len) >= r.device_len - self.size for r in reqs])
            index = torch.from_numpy(np.flatnonzero(keep)).to(self._device, non_blocking=True)
            rows, hidden, positions = rows[keep], hidden[index], positions[index]
        rows_t = torch.from_numpy(rows).to(self._device, non_blocking=True)
        self.features[rows_t, positions % self.size] = hidden.to(self.features.dtype)
        for r in reqs:
            span = np.arange(max(r.cached_len, r.device_len - self.size), r.device_len)
            self.owner[r.table_idx, span % self.size] = np.stack([np.full_like(span, r.uid), span], axis=1)

    def window(self, req: Req, end: int, width: int) -> int:
        """The first position of the longest run of valid features of `req` ending at position end - 1, at most
        `width` long (end when there is none)."""
        start = end
        while start > max(end - width, 0):
            uid, pos = self.owner[req.table_idx, (start - 1) % self.size]
            if uid != req.uid or pos != start - 1:
                break
            start -= 1
        return start


class EagleProposer(Proposer):
    """Greedy guesses of the head for every request that may speculate. A sampled request gets them too, as point
    masses (draft_probs None), which rejection sampling accepts with the target's probability of each token."""

    def __init__(self, config: SpecConfig, target: Engine) -> None:
        from minisgl.distributed import get_tp_info

        if target.graph_runner is not None:
            raise ValueError("EAGLE drafting reads the target's hidden states from eager passes: run the target "
                             "without CUDA graphs (cuda_graph_max_bs=0)")
        if get_tp_info().size > 1:
            raise ValueError("EAGLE drafting runs on one rank (tensor parallelism: not supported)")
        model = target.model
        embed = model.model.embed_tokens.weight
        lm_head = model.lm_head.weight if hasattr(model.lm_head, "weight") else embed
        self.head = load_head(config.draft_model_path, embed, model.model.norm.weight, lm_head,
                              target.config.torch_dtype)
        self.window = self.head.c.window
        self.tap = FeatureTap(target, self.window + config.num_tokens + 1)  # rejected drafts never clobber a window
        self.device = target.device
        self.draft_probs = []

    @torch.inference_mode()
    def propose(self, reqs: Sequence[Req], ks: Sequence[int]) -> list[list[int]]:
        self.draft_probs = [None] * len(reqs)
        drafts: list[list[int]] = [[] for _ in reqs]
        rows = []  # (index in reqs, first position of its window, last position + 1)
        for i, (req, k) in enumerate(zip(reqs, ks)):
            end = len(req.input_ids) - 1  # the last token's position: the target computed every one before it
            start = self.tap.window(req, end, self.window) if k > 0 else end
            if start < end:
                rows.append((i, start, end))
        if not rows:
            return drafts
        width = max(end - start for _, start, end in rows)
        slots, tokens, positions, valid = [], [], [], []
        for i, start, end in rows:  # left-padded to the widest window
            pad = width - (end - start)
            span = np.arange(start - pad, end).clip(min=0)
            slots.append(span % self.tap.size)
            tokens.append(reqs[i].input_ids.numpy()[span + 1])
            positions.append(span)
            valid.append(np.arange(width) >= pad)
        to = lambda a: torch.from_numpy(np.stack(a)).to(self.device)  # noqa: E731
        table_rows = torch.tensor([reqs[i].table_idx for i, _, _ in rows], device=self.device)
        features = self.tap.features[table_rows[:, None], to(slots)]
        guesses = self.head.draft(features, to(tokens).long(), to(positions), to(valid), max(ks))
        for (i, _, _), row in zip(rows, guesses.tolist()):
            drafts[i] = row[: ks[i]]
        return drafts
