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
from dataclasses import dataclass, field
from itertools import accumulate

import numpy as np
import torch

from minisgl.core import Batch, SamplingParams
from minisgl.engine.engine import Engine
from minisgl.engine.sample import top_k_top_p_filter


@dataclass
class SpecStats:
    """What speculation did since the scheduler was made: verify steps run, draft tokens checked in them
    (proposed) and kept (accepted); every verify row also adds one token of the target's own. Per draft position
    j (0: a row's first draft), the drafts checked there and kept there: a draft is kept only after every draft
    before it was, so the kept share falls with j (how far ahead a proposer can guess)."""

    verify_steps: int = 0
    proposed_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)

    @property
    def proposed(self) -> int:
        return sum(self.proposed_at)

    @property
    def accepted(self) -> int:
        return sum(self.accepted_at)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    def count_step(self, drafts: Sequence[Sequence[int]], accepted: Sequence[int]) -> None:
        """One verify step: each row's drafts, and how many of them it kept."""
        self.verify_steps += 1
        width = max(map(len, drafts), default=0)
        for at in (self.proposed_at, self.accepted_at):
            at.extend([0] * (width - len(at)))
        for draft, n in zip(drafts, accepted):
            for j in range(len(draft)):
                self.proposed_at[j] += 1
                self.accepted_at[j] += j < n

    def kept_at(self) -> list[float]:
        """The share of drafts kept at each draft position."""
        return [kept / max(n, 1) for n, kept in zip(self.proposed_at, self.accepted_at)]


def accept_greedy(drafts: torch.Tensor, target_tokens: torch.Tensor, draft_lens: torch.Tensor) -> torch.Tensor:
    """drafts [B, k] (entries past a row's length are padding), target_tokens [B, k + 1] (the target's argmax at
    each position of the row), draft_lens [B] -> accepted drafts per row [B] (int64): the longest prefix of each
    row's own drafts that equals the target's tokens position by position."""
    # TODO(ch26): vectorised, no loop over rows and no value read back to the host (.item(), .tolist(), int(t), if t:
    # each waits for the device): draft i of a row is kept while it equals target_tokens[:, i] and i < the row's
    # draft length, and every draft before it was kept; count the kept ones per row.
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
    # token after a fully accepted run). Vectorised over rows, nothing read back to the host.
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
    # One copy to the device that does not wait for it (a torch.tensor made on the GPU would wait for the pass).
    temps, top_k, top_p = torch.from_numpy(np.array([(p.temperature, p.top_k, p.top_p) for p in params],
                                                    dtype=np.float32).T.copy()).to(logits.device, non_blocking=True)
    each = lambda t: t.repeat_interleave(positions)  # noqa: E731  one value per position of the row
    flat = top_k_top_p_filter(logits.reshape(-1, vocab).float() / each(temps)[:, None], each(top_k).long(),
                              each(top_p))
    return flat.softmax(dim=-1).view(rows, positions, vocab)


def decide_rows(logits: torch.Tensor, sampled: torch.Tensor | None, batch: Batch, drafts: list[list[int]],
                draft_probs: list[torch.Tensor | None], generator: torch.Generator) -> torch.Tensor:
    """Every row's accepted drafts and next token, [2, rows] int64 on the device, from a verify pass's logits [tokens,
    vocab] and the ordinary sampler's token of each row [rows] (a row without drafts keeps it; None when every row has
    drafts). Nothing is read back from the device: the host sends, in one copy, what it knows (where each row's
    positions are, its drafts)."""
    lens = [len(d) for d in drafts]
    spec = [i for i, n in enumerate(lens) if n]  # the rows with drafts
    k = max(lens)
    # Per row with drafts: its positions start .. start + k among the batch's tokens (a shorter row repeats its last
    # one: masked by its length), its drafts padded with -1; then the draft counts, then the rows' places. Plain
    # lists: at a few rows of k + 1 positions they build faster than numpy arrays would.
    ends = list(accumulate(n + 1 for n in lens))
    flat = [ends[i] - lens[i] - 1 + min(j, lens[i]) for i in spec for j in range(k + 1)]
    for i in spec:
        flat += drafts[i] + [-1] * (k - lens[i])
    flat += [lens[i] for i in spec] + spec
    sent = torch.tensor(flat, dtype=torch.int64).to(logits.device, non_blocking=True)  # one copy, no wait
    s = len(spec)
    index, padded, row_lens, rows = sent.split([s * (k + 1), s * k, s, s])
    index, padded = index.view(s, k + 1), padded.view(s, k)
    greedy = [batch.reqs[i].sampling_params.is_greedy for i in spec]
    # The target's own token at every position: one argmax over the batch's tokens (fewer rows than index has),
    # instead of gathering [rows, k + 1, vocab] logits first.
    top = logits.argmax(dim=-1) if any(greedy) else None
    if all(greedy) and s == len(drafts):  # the usual step: no row keeps the sampler's token
        target = top[index]  # [rows, k + 1]
        n = accept_greedy(padded, target, row_lens)
        return torch.stack([n, target.gather(1, n[:, None])[:, 0]])
    counts = torch.zeros(len(drafts), dtype=torch.int64, device=logits.device)
    next_tokens = (sampled.to(torch.int64) if sampled is not None
                   else torch.zeros(len(drafts), dtype=torch.int64, device=logits.device))  # every row overwritten
    greedy = np.array(greedy)
    for group in (np.flatnonzero(greedy), np.flatnonzero(~greedy)):  # places in spec
        if not len(group):
            continue
        sel = slice(None) if len(group) == s else torch.from_numpy(group).to(logits.device, non_blocking=True)
        row_drafts, n_drafts = padded[sel], row_lens[sel]
        if greedy[group[0]]:
            target = top[index[sel]]
            n = accept_greedy(row_drafts, target, n_drafts)
            nxt = target.gather(1, n[:, None])[:, 0]
        else:
            members = [spec[j] for j in group]
            p = target_probs(logits[index[sel]], [batch.reqs[i].sampling_params for i in members])
            q = draft_q([draft_probs[i] for i in members], row_drafts, p.shape[-1])
            n, nxt = accept_rejection(row_drafts, n_drafts, p, q, generator)
        counts[rows[sel]] = n
        next_tokens[rows[sel]] = nxt
    return torch.stack([counts, next_tokens])


def verify_batch(engine: Engine, batch: Batch, drafts: list[list[int]],
                 draft_probs: list[torch.Tensor | None]) -> torch.Tensor:
    """Run a prepared verify batch on the target and queue the decision of every row: [2, rows] int64 on the device,
    each row's accepted drafts and the token after them (a row without drafts: the one the ordinary sampler picked).
    Nothing is read back and no request changes here: the host reads the decisions when it next needs them (the
    step's one wait), and only then are the requests moved on (Speculation.settle)."""
    if not any(drafts):
        raise ValueError("a verify batch needs a row with drafts")
    # [tokens of the batch, vocab], [rows]; the sampler runs only if some row has no drafts (its token is the sampler's)
    logits, sampled = engine.forward_verify(batch, sample=not all(drafts))
    return decide_rows(logits, sampled, batch, drafts, draft_probs, engine.sampler.generator)


def draft_q(probs: list[torch.Tensor | None], drafts: torch.Tensor, vocab: int) -> torch.Tensor:
    """q of sampled rows as [rows, k, vocab] float32, from their drafts [rows, k] (-1 past a row's own): the
    proposer's rows, or one-hot rows for drafts that were point masses; rows past the drafts are zeros (never read:
    masked by the row's length)."""
    rows, k = drafts.shape
    q = torch.zeros(rows, k, vocab, dtype=torch.float32, device=drafts.device)
    points = (drafts >= 0).float()  # a point mass on each draft; padding gets nothing
    q.scatter_(2, drafts.clamp(min=0)[:, :, None], points[:, :, None])
    for j, row in enumerate(probs):
        if row is not None:
            q[j, : len(row)] = row.float()
    return q
