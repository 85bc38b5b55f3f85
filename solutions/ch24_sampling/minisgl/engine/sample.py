"""Turning logits into next tokens: greedy, or temperature with top-k / top-p filtering; from chapter 24 also
logit_bias, the penalties, min_tokens and min_p (engine/processors.py), and the log-probabilities of what was
picked. A batch whose requests ask for none of chapter 24's settings runs exactly chapter 6's code."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from minisgl.core import Logprobs, Req
from minisgl.engine.processors import Penalties, apply_logit_bias, mask_eos, min_p_filter


@dataclass
class LogitsEdits:
    """Chapter 24's changes to a batch's logits before its argmax and temperature, each for the rows that ask for
    it only (None: no row does). Built on the host from the requests, one copy to the device each."""

    bias: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # (rows, token ids, biases), flat
    penalties: Penalties | None = None
    min_tokens_rows: torch.Tensor | None = None  # rows whose EOS is masked
    eos_ids: torch.Tensor | None = None
    token_pool: torch.Tensor | None = None  # where the penalties count tokens


@dataclass
class BatchSamplingArgs:
    """Per-request sampling settings as tensors; temperatures is None when the whole batch is greedy."""

    temperatures: torch.Tensor | None
    top_k: torch.Tensor | None = None
    top_p: torch.Tensor | None = None
    seeded: list[tuple[int, torch.Generator]] = field(default_factory=list)  # (row, its own generator)
    # Chapter 24. min_p: None when no row asks for it (rows at 0 are left alone).
    edits: LogitsEdits | None = None
    min_p: torch.Tensor | None = None
    logprob_rows: torch.Tensor | None = None  # rows that return log-probabilities
    top_logprobs: int = 0  # how many alternatives to gather: the most any of those rows asks for

    @classmethod
    def from_reqs(cls, reqs: list[Req], device: torch.device | str, token_pool: torch.Tensor | None = None,
                  eos_ids: tuple[int, ...] = ()) -> BatchSamplingArgs:
        """token_pool (the engine's, holding every request's tokens) and eos_ids are needed only by requests with
        penalties and min_tokens."""
        params = [r.sampling_params for r in reqs]
        plain = all(not p.changes_logits and not p.logprobs and p.min_p == 0 for p in params)
        if plain and all(p.is_greedy for p in params):
            return cls(temperatures=None)

        def to_device(values: list) -> torch.Tensor:  # a blocking copy would wait for the GPU's queue
            return torch.tensor(values).to(device, non_blocking=True)

        args = cls(temperatures=None)
        if not all(p.is_greedy for p in params):
            args = cls(
                temperatures=to_device([0.0 if p.is_greedy else p.temperature for p in params]),
                top_k=to_device([p.top_k for p in params]),
                top_p=to_device([p.top_p for p in params]),
                seeded=[(i, seeded_generator(r.sampling_params.seed, r.device_len, device))
                        for i, r in enumerate(reqs) if r.sampling_params.seed is not None and not r.sampling_params.is_greedy],
            )
        if plain:
            return args
        args.edits = _edits(reqs, device, token_pool, eos_ids, to_device)
        if any(p.min_p > 0 and not p.is_greedy for p in params):
            args.min_p = to_device([p.min_p for p in params])
        logprob_rows = [i for i, p in enumerate(params) if p.logprobs]
        if logprob_rows:
            args.logprob_rows = to_device(logprob_rows)
            args.top_logprobs = max(params[i].top_logprobs for i in logprob_rows)
        return args


def _edits(reqs: list[Req], device, token_pool, eos_ids, to_device) -> LogitsEdits | None:
    params = [r.sampling_params for r in reqs]
    edits = LogitsEdits(token_pool=token_pool)
    bias = [(i, t, b) for i, p in enumerate(params) for t, b in p.logit_bias.items()]
    if bias:
        rows, tokens, values = zip(*bias)
        edits.bias = (to_device(list(rows)), to_device(list(tokens)), to_device(list(values)).float())
    pen = [i for i, p in enumerate(params) if p.penalised]
    if pen:
        if token_pool is None:
            raise ValueError("penalties count the tokens of the token pool: pass token_pool")
        ps = [params[i] for i in pen]
        edits.penalties = Penalties(
            to_device(pen), to_device([reqs[i].table_idx for i in pen]), to_device([reqs[i].prompt_len for i in pen]),
            to_device([reqs[i].device_len for i in pen]), max(reqs[i].device_len for i in pen),
            to_device([p.presence_penalty for p in ps]).float(), to_device([p.frequency_penalty for p in ps]).float(),
            to_device([p.repetition_penalty for p in ps]).float())
    # device_len - prompt_len tokens generated so far; with ignore_eos an EOS is an ordinary token: nothing to delay
    early = [i for i, r in enumerate(reqs) if not r.sampling_params.ignore_eos
             and r.device_len - r.prompt_len < r.sampling_params.min_tokens]
    if early and eos_ids:
        edits.min_tokens_rows, edits.eos_ids = to_device(early), to_device(list(eos_ids))
    if edits.bias is None and edits.penalties is None and edits.min_tokens_rows is None:
        return None
    return edits


def seeded_generator(seed: int, position: int, device: torch.device | str) -> torch.Generator:
    """A generator for one draw of a seeded request: its state depends on the seed and the token's position only,
    so the request samples the same tokens whatever else shares its batches (nothing to keep between steps)."""
    return torch.Generator(device=device).manual_seed(hash((seed, position)) & (2**63 - 1))


def top_k_top_p_filter(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Set to -inf every logit outside the row's top-k and outside its top-p nucleus (keeping the best one). Both
    filters read the same distribution, the softmax of the whole row, as SGLang's samplers do (Hugging Face
    renormalises what top-k kept before its top-p: the two differ where both filters bind)."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    ranks = torch.arange(logits.shape[-1], device=logits.device)[None, :]
    k = torch.where(top_k > 0, top_k, logits.shape[-1])[:, None]
    drop = ranks >= k
    probs = sorted_logits.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # probability mass of the better tokens
    drop |= before >= top_p[:, None]
    drop[:, 0] = False
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


def gather_logprobs(logits: torch.Tensor, tokens: torch.Tensor, rows: torch.Tensor, k: int) -> Logprobs:
    """From the model's logits (float32 log_softmax), before any processing: the distribution the model gives,
    whatever the temperature or penalties of the request (vLLM's default, logprobs_mode "raw_logprobs"; SGLang
    returns them after its temperature by default). tokens [B], rows [R] (of the batch)."""
    # TODO(ch24): log_softmax (in float32) of the rows that asked; the entry of the token each row picked; the k
    # largest entries and their token ids (topk of a row is sorted, best first).
    # >>> solution
    logp = logits[rows].float().log_softmax(dim=-1)
    chosen = logp.gather(1, tokens[rows].long()[:, None]).squeeze(1)
    top = logp.topk(k, dim=-1)
    return Logprobs(chosen, top.indices, top.values)
    # <<< solution


class Sampler:
    def __init__(self, device: torch.device | str, seed: int = 0) -> None:
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def sample(self, logits: torch.Tensor, args: BatchSamplingArgs) -> torch.Tensor:
        """logits [B, vocab] (the model's dtype) -> next token ids [B] (int32). The argmax needs no cast (16-bit
        to float32 is exact, so it picks the same token, and a 16-bit argmax reads half the bytes: chapter 22);
        what is sampled or edited is computed in float32, so that no softmax runs in 16 bits."""
        if args.edits is not None:  # chapter 24: these change what greedy picks too
            logits = edit_logits(logits.float(), args.edits)
        greedy = logits.argmax(dim=-1)
        if args.temperatures is None:
            return greedy.to(torch.int32)
        temps = torch.where(args.temperatures > 0, args.temperatures, 1.0)
        filtered = top_k_top_p_filter(logits.float() / temps[:, None], args.top_k, args.top_p)
        if args.min_p is not None:
            filtered = min_p_filter(filtered, args.min_p)
        probs = filtered.softmax(dim=-1)
        sampled = torch.multinomial(probs, 1, generator=self.generator).squeeze(1)
        for row, generator in args.seeded:  # a seeded request draws from its own generator
            sampled[row] = torch.multinomial(probs[row], 1, generator=generator)[0]
        return torch.where(args.temperatures > 0, sampled, greedy).to(torch.int32)


def edit_logits(logits: torch.Tensor, edits: LogitsEdits) -> torch.Tensor:
    """Chapter 24's edits of a batch's float32 logits, before the argmax and the temperature: logit_bias, the
    penalties and the min_tokens mask, each on the rows that ask for it (a field of `edits` left None: no row
    does). Returns the edited logits; the order of the edits is the chapter's rule (Hugging Face's and vLLM's)."""
    # TODO(ch24): apply each edit that is there: apply_logit_bias(logits, *edits.bias),
    # edits.penalties.apply(logits, edits.token_pool), mask_eos(logits, edits.min_tokens_rows, edits.eos_ids).
    # Choose their order: the repetition penalty divides a positive logit and multiplies a negative one, so
    # whether it sees the biased logit changes the result, and Hugging Face and vLLM add the bias first; the
    # min_tokens mask sets EOS to -inf, and comes last, after everything that could move a logit.
    # >>> solution
    if edits.bias is not None:
        logits = apply_logit_bias(logits, *edits.bias)
    if edits.penalties is not None:
        logits = edits.penalties.apply(logits, edits.token_pool)
    if edits.min_tokens_rows is not None:
        logits = mask_eos(logits, edits.min_tokens_rows, edits.eos_ids)
    # <<< solution
    return logits
