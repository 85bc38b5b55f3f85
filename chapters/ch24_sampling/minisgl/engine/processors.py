"""Logits processors of the sampling API (chapter 24): each changes some rows of a float32 [B, vocab] batch of
logits, with one vectorised operation for all of them, and leaves every other row bit for bit as it was.

Before the temperature, on the model's logits (vLLM's order): logit_bias, the penalties, min_tokens. They change
what greedy picks too. After the temperature and top-k / top-p (Hugging Face's order of warpers): min_p.

The penalties need, per request, the counts of the tokens it has seen. They are counted at every step from the
engine's token pool rather than kept in a per-request [vocab] tensor updated after each step (SGLang's way): the
pool row already holds the prompt and every token generated, on the device, in order, whatever happened to the
request (a prefix found in the radix cache is written to the row at admission, a retracted request is written
again when it comes back, and with overlap scheduling the previous step's token is written before this step
samples, on the same stream). Counting costs one gather and one scatter_add over the penalised rows, a few
microseconds next to a forward pass, and there is no second copy of the state to keep in step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def token_counts(token_pool: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor,
                 vocab: int, max_end: int) -> torch.Tensor:
    """[R, vocab] float32: how often each token occurs in token_pool[rows[i], starts[i]:ends[i]]. max_end is
    max(ends), known on the host (reading it from the device tensor would wait for the GPU)."""
    cols = torch.arange(max_end, device=token_pool.device)
    ids = token_pool[rows[:, None], cols[None, :]].long()  # what lies past a row's end is weighted 0
    inside = (cols[None, :] >= starts[:, None]) & (cols[None, :] < ends[:, None])
    return torch.zeros(len(rows), vocab, device=token_pool.device).scatter_add_(1, ids, inside.float())


def apply_penalties(logits: torch.Tensor, output_counts: torch.Tensor, seen: torch.Tensor, presence: torch.Tensor,
                    frequency: torch.Tensor, repetition: torch.Tensor) -> torch.Tensor:
    """The penalties of R rows: logits, output_counts [R, vocab] (tokens generated so far), seen [R, vocab] bool
    (in the prompt or the output), presence, frequency, repetition [R]. Returns new logits."""
    # TODO(ch24): first the repetition penalty (CTRL, Hugging Face's RepetitionPenaltyLogitsProcessor): every
    # seen token's logit is divided by the row's penalty if positive, multiplied by it otherwise (so a penalty > 1
    # always makes it less likely); then OpenAI's penalties, over the output only: minus frequency times the
    # token's count, minus presence once if the token occurred at all.
    raise NotImplementedError("TODO(ch24): apply_penalties")


def min_p_filter(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Min-p sampling (Nguyen et al., Hugging Face's MinPLogitsWarper): set to -inf every logit whose probability
    is below min_p times the row's best probability. A row with min_p 0 is returned unchanged, bit for bit."""
    # TODO(ch24): the softmax of each row; its largest probability times the row's min_p is the threshold; mask
    # (to -inf) the tokens below it. The best token is never below its own threshold (min_p <= 1).
    raise NotImplementedError("TODO(ch24): min_p_filter")


@dataclass
class Penalties:
    """What the penalised rows of a batch need: their rows in the batch and in the token pool, where their prompt
    ends and their sequence ends (device_len: the pool holds every token up to it), and their three penalties."""

    batch_rows: torch.Tensor  # [P] int64, rows of the logits
    pool_rows: torch.Tensor  # [P] int64, rows of the token pool
    prompt_lens: torch.Tensor  # [P]
    seq_lens: torch.Tensor  # [P]
    max_seq_len: int  # max(seq_lens), on the host
    presence: torch.Tensor  # [P] float32
    frequency: torch.Tensor
    repetition: torch.Tensor

    def apply(self, logits: torch.Tensor, token_pool: torch.Tensor) -> torch.Tensor:
        vocab = logits.shape[-1]
        zeros = torch.zeros_like(self.prompt_lens)
        seen = token_counts(token_pool, self.pool_rows, zeros, self.seq_lens, vocab, self.max_seq_len) > 0
        output = token_counts(token_pool, self.pool_rows, self.prompt_lens, self.seq_lens, vocab, self.max_seq_len)
        rows = logits[self.batch_rows]
        done = apply_penalties(rows, output, seen, self.presence, self.frequency, self.repetition)
        return logits.index_copy(0, self.batch_rows, done)


def apply_logit_bias(logits: torch.Tensor, rows: torch.Tensor, tokens: torch.Tensor,
                     bias: torch.Tensor) -> torch.Tensor:
    """logits[rows[i], tokens[i]] += bias[i] for every entry of every row's logit_bias, in one indexed add."""
    return logits.index_put((rows, tokens), bias, accumulate=True)


def mask_eos(logits: torch.Tensor, rows: torch.Tensor, eos_ids: torch.Tensor) -> torch.Tensor:
    """min_tokens (Hugging Face's MinNewTokensLengthLogitsProcessor): the rows that have not generated enough
    tokens yet cannot pick an end-of-sequence token."""
    logits = logits.clone()
    logits[rows[:, None], eos_ids[None, :]] = float("-inf")
    return logits
