"""Verification: which drafts the target accepts, and the token it adds after them.

One forward pass of the target computes logits at every position of a verify row: after its last token (which
checks draft 1), after draft 1 (which checks draft 2), ..., after draft k (the token after a fully accepted run).
A greedy row keeps the longest run of drafts that equal the target's own argmax and then takes the target's
argmax after that run. A sampled row uses speculative sampling (Leviathan et al. 2023, Chen et al. 2023): draft i
is kept with probability min(1, p(x_i) / q(x_i)), p the target's distribution there and q the one the draft was
drawn from; at the first rejection the token comes from the residual normalise(max(p - q, 0)), and after a fully
accepted run from p itself. Either way every row gains between 1 and k + 1 tokens, distributed exactly as the
target alone would have produced them: greedy answers are token-identical, sampled ones equal in distribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from minisgl.core import Batch, SamplingParams
from minisgl.engine.engine import Engine
from minisgl.engine.sample import top_k_top_p_filter


@dataclass
class SpecStats:
    """What speculation did since the scheduler was made: verify steps run, draft tokens checked in them
    (proposed) and kept (accepted); every verify row also adds one token of the target's own."""

    verify_steps: int = 0
    proposed: int = 0
    accepted: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0


def accept_greedy(drafts: torch.Tensor, target_tokens: torch.Tensor, draft_lens: torch.Tensor) -> torch.Tensor:
    """drafts [B, k] (entries past a row's length are padding), target_tokens [B, k + 1] (the target's argmax at
    each position of the row), draft_lens [B] -> accepted drafts per row [B] (int64): the longest prefix of each
    row's own drafts that equals the target's tokens position by position."""
    # TODO(ch26): vectorised, no loop over rows: draft i of a row is kept while it equals target_tokens[:, i] and
    # i < the row's draft length, and every draft before it was kept; count the kept ones per row.
    # >>> solution
    k = drafts.shape[1]
    within = torch.arange(k, device=drafts.device)[None, :] < draft_lens[:, None]
    match = (drafts == target_tokens[:, :k]) & within
    return match.long().cumprod(dim=1).sum(dim=1)
    # <<< solution


def accept_rejection(drafts: torch.Tensor, draft_lens: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
                     generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative sampling. drafts [B, k] (padding past each row's length), draft_lens [B], p [B, k + 1, vocab]
    the target's probabilities at each position, q [B, k, vocab] those each draft was drawn from (an n-gram draft:
    a one-hot row, a point mass), all float32 -> (accepted drafts per row [B] int64, the token after them [B]
    int64). Random numbers come from `generator` (the engine's)."""
    # TODO(ch26): with u uniform in [0, 1) per draft (torch.rand(..., generator=generator)), draft i is kept when
    # u * q(x_i) < p(x_i) (probability min(1, p/q); never when p(x_i) = 0) and i < the row's draft length, and
    # every draft before it was kept; n = the kept count. The next token is sampled (torch.multinomial, same
    # generator) from normalise(max(p[n] - q[n], 0)) if n < the row's draft length, else from p[n] (the bonus
    # token after a fully accepted run). Vectorised over rows.
    # >>> solution
    rows, k = drafts.shape
    index = torch.arange(rows, device=p.device)
    within = torch.arange(k, device=p.device)[None, :] < draft_lens[:, None]
    x = drafts.clamp(min=0)[:, :, None]  # padding reads token 0: masked by `within`
    p_x, q_x = p[:, :k].gather(2, x).squeeze(2), q.gather(2, x).squeeze(2)
    u = torch.rand(rows, k, generator=generator, device=p.device)
    kept = (u * q_x < p_x) & within
    n = kept.long().cumprod(dim=1).sum(dim=1)
    rejected = n < draft_lens
    q_n = q[index, n.clamp(max=k - 1)] * rejected[:, None]  # after a fully accepted run: p itself
    residual = (p[index, n] - q_n).clamp(min=0)
    total = residual.sum(dim=1, keepdim=True)
    residual = torch.where(total > 0, residual / total.clamp(min=1e-30), p[index, n])  # p == q up to rounding: p
    return n, torch.multinomial(residual, 1, generator=generator).squeeze(1)
    # <<< solution


def target_probs(logits: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """logits [R, positions, vocab] of R sampled rows -> float32 probabilities after each row's temperature, top-k
    and top-p: the distribution the engine's sampler draws a row's token from (engine/sample.py)."""
    rows, positions, vocab = logits.shape
    device = logits.device
    temps = torch.tensor([p.temperature for p in params], device=device).repeat_interleave(positions)
    top_k = torch.tensor([p.top_k for p in params], device=device).repeat_interleave(positions)
    top_p = torch.tensor([p.top_p for p in params], device=device).repeat_interleave(positions)
    flat = top_k_top_p_filter(logits.reshape(-1, vocab).float() / temps[:, None], top_k, top_p)
    return flat.softmax(dim=-1).view(rows, positions, vocab)


def verify_batch(engine: Engine, batch: Batch, drafts: list[list[int]],
                 draft_probs: list[torch.Tensor | None]) -> tuple[list[list[int]], list[int]]:
    """Run a prepared verify batch on the target and decide every row: (the tokens each row gains, in order, and
    how many of its drafts were accepted). Rows without drafts gain the token the ordinary sampler picked for them.
    The requests' state is brought up to date (Engine.complete_verify); their rejected pages are not freed here."""
    logits, sampled = engine.forward_verify(batch)  # [tokens of the batch, vocab], [rows]
    lens = [len(d) for d in drafts]
    k = max(lens)
    counts = torch.zeros(len(lens), dtype=torch.long, device=logits.device)
    next_tokens = sampled.long()
    starts, start = [], 0
    for n in lens:
        starts.append(start)
        start += n + 1
    spec = [i for i, n in enumerate(lens) if n > 0]
    greedy = [i for i in spec if batch.reqs[i].sampling_params.is_greedy]
    for group in (greedy, [i for i in spec if i not in greedy]):
        if not group:
            continue
        # positions start .. start + k of each row (a shorter row repeats its last one: masked by its length)
        index = torch.tensor([[starts[i] + min(j, lens[i]) for j in range(k + 1)] for i in group], device=logits.device)
        rows = torch.tensor(group, device=logits.device)
        padded = torch.tensor([drafts[i] + [-1] * (k - lens[i]) for i in group], device=logits.device)
        row_lens = torch.tensor([lens[i] for i in group], device=logits.device)
        if group is greedy:
            target = logits[index].argmax(dim=-1)  # [G, k + 1]
            n = accept_greedy(padded, target, row_lens)
            nxt = target.gather(1, n[:, None]).squeeze(1)
        else:
            p = target_probs(logits[index], [batch.reqs[i].sampling_params for i in group])
            q = torch.stack([_draft_q(draft_probs[i], drafts[i], k, p.shape[-1], p.device) for i in group])
            n, nxt = accept_rejection(padded, row_lens, p, q, engine.sampler.generator)
        counts[rows], next_tokens[rows] = n, nxt
    accepted, tokens = torch.stack([counts, next_tokens]).tolist()  # the host waits here: the lengths depend on it
    engine.complete_verify(batch, accepted, next_tokens)
    gained = [d[:n] + [t] for d, n, t in zip(drafts, accepted, tokens)]
    return gained, accepted


def _draft_q(probs: torch.Tensor | None, drafts: list[int], k: int, vocab: int, device) -> torch.Tensor:
    """q of one row as [k, vocab] float32: the proposer's rows, or one-hot rows for drafts that were point masses;
    rows past the drafts are zeros (never read: masked by the row's length)."""
    q = torch.zeros(k, vocab, dtype=torch.float32, device=device)
    if probs is not None:
        q[: len(drafts)] = probs.float()
    else:
        q[torch.arange(len(drafts), device=device), torch.tensor(drafts, dtype=torch.long, device=device)] = 1.0
    return q
