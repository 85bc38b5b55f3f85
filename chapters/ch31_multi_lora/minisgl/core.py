"""The engine's vocabulary: sampling parameters, requests, batches and the forward context."""

from __future__ import annotations

import math
import numbers
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Literal, NamedTuple

import torch

if TYPE_CHECKING:
    from minisgl.attention.base import BaseAttnBackend
    from minisgl.kvcache.base import BaseKVCache


@dataclass
class SamplingParams:
    """How to pick the next token. temperature 0 (the default) means greedy."""

    temperature: float = 0.0
    top_k: int = -1  # -1: no limit
    top_p: float = 1.0
    max_tokens: int = 16
    ignore_eos: bool = False
    seed: int | None = None  # sampled tokens depend only on (seed, position): reproducible in any batch
    # Chapter 24: the rest of the sampling API. Every default leaves the logits untouched.
    presence_penalty: float = 0.0  # OpenAI: minus this once for every token already in the output
    frequency_penalty: float = 0.0  # OpenAI: minus this times the token's count in the output
    repetition_penalty: float = 1.0  # CTRL / HF: a token of the prompt or output scores divided (or multiplied) by it
    min_p: float = 0.0  # drop tokens less likely than min_p times the best one (after the temperature)
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> added to its logit, OpenAI's field
    min_tokens: int = 0  # EOS cannot be sampled before this many output tokens
    logprobs: bool = False  # return the log-probability of every sampled token
    top_logprobs: int = 0  # ...and of the most likely top_logprobs tokens at each step (needs logprobs)
    n: int = 1  # samples per prompt (LLM.generate / the server make n requests of it, seeds seed, seed + 1, ...)
    # Chapter 25: structured output, at most one of them (SGLang's names).
    json_schema: str | None = None  # a JSON schema, as JSON text ('{"type": "object"}': any JSON object)
    regex: str | None = None  # a regular expression the whole output matches
    ebnf: str | None = None  # an EBNF grammar (xgrammar's dialect, with a `root` rule)
    # Chapter 31: the LoRA adapter that computes this request (None: the base model). Not a sampling setting, but
    # it travels with the request's settings everywhere they go (queues, retraction, n > 1); the server sets it
    # from the OpenAI `model` field.
    lora_name: str | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """ValueError naming the field and its value if a setting is unusable. It runs when the params are made
        and again when a request is queued (Engine.check_request): a field changed in between is caught too.
        Integers may be numpy or torch integer scalars (they become ints); bools are not numbers here."""
        self.max_tokens = _integer("max_tokens", self.max_tokens, minimum=1)
        self.top_k = _integer("top_k", self.top_k, minimum=-1)
        if self.top_k == 0:
            raise ValueError("top_k must be -1 (off) or >= 1, got 0")
        self.temperature = _real("temperature", self.temperature)
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        self.top_p = _real("top_p", self.top_p)
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be True or False, got {self.ignore_eos!r}")
        if self.seed is not None:
            self.seed = _integer("seed", self.seed, minimum=0)
            if self.seed >= 2**63:
                raise ValueError(f"seed must be below 2**63, got {self.seed}")
        self._validate_sampling_api()
        self._validate_grammar()
        if self.lora_name is not None and (not isinstance(self.lora_name, str) or not self.lora_name):
            raise ValueError(f"lora_name must be a non-empty string or None, got {self.lora_name!r}")

    def _validate_sampling_api(self) -> None:
        """The ranges OpenAI (penalties, logit_bias, top_logprobs) and vLLM (the others) accept. Token ids of
        logit_bias are checked against the vocabulary by Engine.check_request, which knows it."""
        for name in ("presence_penalty", "frequency_penalty"):
            value = _real(name, getattr(self, name))
            if not -2.0 <= value <= 2.0:
                raise ValueError(f"{name} must be in [-2, 2], got {value!r}")
            setattr(self, name, value)
        self.repetition_penalty = _real("repetition_penalty", self.repetition_penalty)
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0 (1 is off), got {self.repetition_penalty!r}")
        self.min_p = _real("min_p", self.min_p)
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p!r}")
        if not isinstance(self.logit_bias, dict):
            raise ValueError(f"logit_bias must be a dict of token id -> bias, got {self.logit_bias!r}")
        bias = {}
        for token, value in self.logit_bias.items():
            token = _integer("a logit_bias token id", token, minimum=0)
            value = _real(f"logit_bias[{token}]", value)
            if not -100.0 <= value <= 100.0:
                raise ValueError(f"logit_bias[{token}] must be in [-100, 100], got {value!r}")
            bias[token] = value
        self.logit_bias = bias
        self.min_tokens = _integer("min_tokens", self.min_tokens, minimum=0)
        if self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens ({self.min_tokens}) must be <= max_tokens ({self.max_tokens})")
        if not isinstance(self.logprobs, bool):
            raise ValueError(f"logprobs must be True or False, got {self.logprobs!r}")
        self.top_logprobs = _integer("top_logprobs", self.top_logprobs, minimum=0)
        if self.top_logprobs > MAX_TOP_LOGPROBS:
            raise ValueError(f"top_logprobs must be at most {MAX_TOP_LOGPROBS}, got {self.top_logprobs}")
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs=True")
        self.n = _integer("n", self.n, minimum=1)

    def _validate_grammar(self) -> None:
        """A grammar is text; whether it compiles is for the grammar cache, which knows the tokenizer."""
        given = [name for name in GRAMMAR_KINDS if getattr(self, name) is not None]
        for name in given:
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        if len(given) > 1:
            raise ValueError(f"give at most one of json_schema, regex and ebnf, got {' and '.join(given)}")

    @property
    def grammar(self) -> tuple[str, str] | None:
        """(kind, text) of the grammar the output must follow, or None."""
        for name in GRAMMAR_KINDS:
            if getattr(self, name) is not None:
                return name, getattr(self, name)
        return None

    @property
    def penalised(self) -> bool:
        """Whether the tokens generated so far change the logits (the penalties need their counts)."""
        return self.presence_penalty != 0 or self.frequency_penalty != 0 or self.repetition_penalty != 1

    @property
    def changes_logits(self) -> bool:
        """Whether anything runs on this row's logits before the argmax: greedy rows of such requests take the
        argmax of the processed logits, not of the model's."""
        return self.penalised or bool(self.logit_bias) or self.min_tokens > 0

    @property
    def is_greedy(self) -> bool:
        """Greedy at temperature 0, top_k 1, and below GREEDY_BELOW: logits divided by a temperature that small
        overflow float32 (a softmax of inf is NaN), and what they would sample is the argmax anyway."""
        return self.temperature < GREEDY_BELOW or self.top_k == 1


GREEDY_BELOW = 1e-5  # temperatures below this sample greedily (vLLM's threshold, _SAMPLING_EPS)
MAX_TOP_LOGPROBS = 20  # OpenAI's limit for top_logprobs
GRAMMAR_KINDS = ("json_schema", "regex", "ebnf")  # chapter 25


def _integer(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


@dataclass(eq=False)
class Req:
    """One request. Its tokens live in three ranges of one growing sequence:

        [0, cached_len)           KV already computed and stored in the cache
        [cached_len, device_len)  tokens the next forward pass computes (the "extend" part)
        [device_len, max_device_len)  tokens still to be generated
    """

    input_ids: torch.Tensor  # CPU int32: the prompt, then every token generated so far (a property: see below)
    table_idx: int  # this request's row in the page table and token pool
    cached_len: int
    output_len: int  # the most tokens this request may generate
    uid: int
    sampling_params: SamplingParams
    cache_handle: Any = None

    def __post_init__(self) -> None:
        self.prompt_len = len(self.input_ids)
        self.device_len = len(self.input_ids)
        self.max_device_len = len(self.input_ids) + self.output_len
        self.finish_reason: str | None = None  # why it ended ("stop", "length"), set by the scheduler (chapter 11)
        self.logprobs: list[TokenLogprob] | None = None  # chapter 24: set when it finishes, if it asked
        # Chapter 31, set at admission: the engine slot of its LoRA adapter (-1: none) and the adapter's id, which
        # keys its prefix-cache entries (0: the base model).
        self.lora_slot = -1
        self.lora_id = 0
        if not 0 <= self.cached_len < self.device_len:
            raise ValueError(f"cached_len {self.cached_len} must be in [0, {self.device_len})")

    @property
    def extend_len(self) -> int:
        """How many tokens the next forward pass computes for this request."""
        return self.device_len - self.cached_len

    @property
    def remain_len(self) -> int:
        """How many more tokens this request may still generate."""
        return self.max_device_len - self.device_len

    @property
    def can_decode(self) -> bool:
        return self.remain_len > 0

    @property
    def samples(self) -> bool:
        """Whether its forward pass samples a token (chapter 21: a chunk of an unfinished prompt does not)."""
        return True

    @property
    def output_ids(self) -> list[int]:
        return self.input_ids[self.prompt_len :].tolist()

    def complete_one(self) -> None:
        """A forward pass finished: its tokens are now cached and one new token exists on the device."""
        self.cached_len = self.device_len
        self.device_len += 1

    def append_host(self, next_token: int) -> None:
        """Record the sampled token on the CPU copy of the sequence.

        This runs for every request at every step, so it stays cheap: the tokens live in a buffer with room for
        the whole request, and input_ids, a view of its filled part, is made when it is read, not per token (a
        view costs a few microseconds, a torch.cat per token would copy the sequence each time: milliseconds per
        step at batch 256). host_len counts the tokens without making the view. Entries already in input_ids are
        never written again, so views handed out earlier stay valid."""
        n = self.host_len
        if self._host_np is None or n >= len(self._host_np):
            # first token, or input_ids was set since: a new buffer, sized for the rest of the request
            ids = self._ids
            buf = torch.empty(max(self.max_device_len, n + 1), dtype=ids.dtype)
            buf[:n] = ids
            self._host_buffer, self._host_np = buf, buf.numpy()
        self._host_np[n] = next_token  # through numpy, which shares the memory: ~40x cheaper than buf[n] = ...
        self.host_len = n + 1

    def _get_input_ids(self) -> torch.Tensor:
        if self._ids_len != self.host_len:  # tokens were appended since the last read
            self._ids, self._ids_len = self._host_buffer[: self.host_len], self.host_len
        return self._ids

    def _set_input_ids(self, ids: torch.Tensor) -> None:
        self._ids, self._ids_len = ids, len(ids)
        self.host_len = self._ids_len
        self._host_buffer = self._host_np = None  # the next append_host copies `ids` into a buffer of its own

    def __repr__(self) -> str:
        return (f"Req(uid={self.uid}, table_idx={self.table_idx}, cached_len={self.cached_len}, "
                f"device_len={self.device_len}, max_device_len={self.max_device_len})")


# input_ids is a property over append_host's buffer, set after the class is made: a property in the class body
# would count as the default value of the dataclass field (which gives __init__ its first argument).
Req.input_ids = property(Req._get_input_ids, Req._set_input_ids,
                         doc="CPU int32: the prompt, then every token generated so far")


@dataclass
class Logprobs:
    """Chapter 24: log-probabilities of a batch's logprob rows (tensors, on the device or the CPU): of the token
    each picked [R], and of the top_logprobs most likely tokens [R, k], best first (a row that asked for fewer
    reads its first entries)."""

    chosen: torch.Tensor
    top_ids: torch.Tensor
    top_values: torch.Tensor


class BatchLogprobs(NamedTuple):
    """Chapter 24: what the sampler gathered for a batch: the requests that asked, in batch order, and their
    Logprobs (row i is reqs[i])."""

    reqs: list[Req]
    values: Logprobs


class TokenLogprob(NamedTuple):
    """Chapter 24: one output token's log-probability and its top_logprobs (token id, logprob) pairs, best first."""

    logprob: float
    top: list[tuple[int, float]]


class GrammarMask(NamedTuple):
    """Chapter 25: the batch rows whose requests sample under a grammar, and their token bitmasks [rows, words]
    int32 on the CPU (bitmask[k] is what the grammar of row rows[k] allows next)."""

    rows: list[int]
    bitmask: torch.Tensor


class Drafts(NamedTuple):
    """Chapter 26: a verify batch's draft tokens per row, their q rows (None: a point mass, see Proposer.draft_probs)
    and the drafts each row could take (0: it decodes one token). Once the batch is launched: each row's device_len
    before its pages were allocated (ends) and the decisions the device is computing ([2, rows]: accepted drafts,
    new token), which the scheduler reads back when it processes the batch."""

    tokens: list[list[int]]
    probs: list[torch.Tensor | None]
    lengths: list[int]
    ends: list[int] | None = None
    decided: torch.Tensor | None = None


@dataclass
class Batch:
    """Requests that go through one forward pass together.

    "prefill": every request computes (a piece of) its prompt. "decode": every request computes one token.
    "mixed" (chapter 21): one pass of both, the prefill requests first, then running requests that decode one
    token each. "verify" (chapter 26, speculative decoding): every request is a running one that computes its last
    token and the draft tokens written after it (extend_len = drafts + 1; a row without drafts computes its last
    token only), and the model returns logits at every one of those positions. Only a pure decode batch takes the
    one-query-per-request paths (decode kernels, CUDA graphs); prefill, mixed and verify batches go through the
    variable-length (extend) paths, which take any query lengths.
    """

    reqs: list[Req]
    phase: Literal["prefill", "decode", "mixed", "verify"]
    # Filled in when the batch is prepared (chapter 5 on): flattened inputs for every request.
    input_ids: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    out_loc: torch.Tensor | None = None  # KV-cache slot of every new token
    attn_metadata: Any = None
    num_prefill: int | None = None  # how many leading requests compute prompt tokens (given for a mixed batch)
    logprobs: BatchLogprobs | None = None  # chapter 24: set when the batch is sampled, if a request asked
    # Chapter 25: filled by the scheduler when it prepares the batch; None when no sampling row has a grammar.
    grammar_mask: GrammarMask | None = None
    drafts: Drafts | None = None  # chapter 26: of a verify batch, set by the scheduler when it makes the batch

    def __post_init__(self) -> None:
        if self.phase not in ("prefill", "decode", "mixed", "verify"):
            raise ValueError(f"phase must be 'prefill', 'decode', 'mixed' or 'verify', got {self.phase!r}")
        if not self.reqs:
            raise ValueError("a batch needs at least one request")
        if self.phase == "mixed":
            if self.num_prefill is None or not 0 < self.num_prefill < len(self.reqs):
                raise ValueError(f"a mixed batch of {len(self.reqs)} requests needs 0 < num_prefill < "
                                 f"{len(self.reqs)}, got {self.num_prefill}")
        else:
            self.num_prefill = len(self.reqs) if self.is_prefill else 0

    @classmethod
    def mixed(cls, prefill: Batch, decode: Batch) -> Batch:
        """One batch that runs a prefill batch's requests and a decode batch's requests together."""
        if not (prefill.is_prefill and decode.is_decode):
            raise ValueError(f"mix a prefill batch with a decode batch, got {prefill.phase} and {decode.phase}")
        return cls(prefill.reqs + decode.reqs, "mixed", num_prefill=prefill.size)

    @property
    def is_prefill(self) -> bool:
        return self.phase == "prefill"

    @property
    def is_decode(self) -> bool:
        return self.phase == "decode"

    @property
    def is_mixed(self) -> bool:
        return self.phase == "mixed"

    @property
    def is_verify(self) -> bool:
        return self.phase == "verify"

    @property
    def prefill_reqs(self) -> list[Req]:
        """The requests that compute prompt tokens: all of a prefill batch, the leading ones of a mixed batch."""
        return self.reqs[: self.num_prefill]

    @property
    def decode_reqs(self) -> list[Req]:
        """The running requests: all of a decode (or verify) batch, the trailing ones of a mixed batch."""
        return self.reqs[self.num_prefill :]

    @property
    def size(self) -> int:
        return len(self.reqs)


class Context:
    """What every layer may need during a forward pass, without threading it through every call.

    The one piece of global state in the engine: read by layers (get_global_ctx), set by whoever forwards a
    batch (forward_batch installs its context for the block; set_global_ctx sets one outside any batch).
    `batch` is only valid inside `forward_batch`.
    """

    def __init__(self, page_size: int = 1) -> None:
        self.page_size = page_size
        self.kv_cache: BaseKVCache | None = None
        self.attn_backend: BaseAttnBackend | None = None
        self.page_table: torch.Tensor | None = None
        # Chapter 31: the LoRA slot of every token of the batch being forwarded (-1: no adapter); the adapted
        # linear layers read its first `tokens` entries. None: LoRA is off.
        self.lora_slots: torch.Tensor | None = None
        self._batch: Batch | None = None

    @property
    def batch(self) -> Batch:
        if self._batch is None:
            raise RuntimeError("no batch is being forwarded: use `with ctx.forward_batch(batch):`")
        return self._batch

    @contextmanager
    def forward_batch(self, batch: Batch) -> Iterator[Batch]:
        """Make `batch` the current batch, and this context the one layers find (get_global_ctx), for the
        duration of the block, even if the block raises. Each engine has its own context, so several engines
        can live in one process: whichever is forwarding a batch is the one the layers see."""
        global _GLOBAL_CTX
        if self._batch is not None:
            raise RuntimeError("forward_batch is already active: batches cannot nest")
        previous, _GLOBAL_CTX = _GLOBAL_CTX, self
        self._batch = batch
        try:
            yield batch
        finally:
            self._batch = None
            _GLOBAL_CTX = previous


_GLOBAL_CTX: Context | None = None


def set_global_ctx(ctx: Context) -> None:
    global _GLOBAL_CTX
    _GLOBAL_CTX = ctx


def get_global_ctx() -> Context:
    if _GLOBAL_CTX is None:
        raise RuntimeError("the global context is not set: create an Engine (or call set_global_ctx) first")
    return _GLOBAL_CTX
