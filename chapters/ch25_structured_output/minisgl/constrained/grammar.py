"""Structured output (chapter 25): grammars compiled once, a matcher per request, and the token bitmask.

A request may ask for its output to follow a JSON schema, a regular expression or an EBNF grammar. xgrammar
compiles the grammar against the tokenizer's vocabulary (which token strings can extend which partial outputs);
a matcher per request then walks the grammar token by token. Before a step samples, each constrained row asks its
matcher which tokens are allowed next, as a bitmask of ceil(vocab / 32) int32 words (bit j of word i: token
32 * i + j); the sampler sets every other logit to -inf. After the step, the sampled token advances the matcher.
The request ends when its matcher has reached the end of the grammar (it accepted a stop token there).

Compiling is the expensive part (a JSON schema takes milliseconds to seconds), so compiled grammars are cached by
their text: the requests of one client with one schema compile it once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

import torch

GrammarKind = Literal["json_schema", "regex", "ebnf"]


@dataclass(frozen=True)
class GrammarSpec:
    """What a request's output must follow: a JSON schema (a JSON text; '{"type": "object"}' is any JSON object),
    a regular expression, or an EBNF grammar (xgrammar's GBNF dialect, with a root rule)."""

    kind: GrammarKind
    text: str


class GrammarCache:
    """Grammars compiled against one tokenizer, cached by (kind, text). `compile` raises ValueError naming the
    problem for a grammar that does not compile (the request is refused before any state changes)."""

    def __init__(self, tokenizer, vocab_size: int) -> None:
        import xgrammar as xgr

        self.vocab_size = vocab_size  # the model's (its logits' width), which may exceed the tokenizer's
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=1)
        self._compiled: dict[GrammarSpec, object] = {}

    def compile(self, spec: GrammarSpec):
        compiled = self._compiled.get(spec)
        if compiled is not None:
            return compiled
        try:
            if spec.kind == "json_schema":
                json.loads(spec.text)  # xgrammar's message for bad JSON is less clear than json's
                compiled = self.compiler.compile_json_schema(spec.text)
            elif spec.kind == "regex":
                compiled = self.compiler.compile_regex(spec.text)
            elif spec.kind == "ebnf":
                compiled = self.compiler.compile_grammar(spec.text)
            else:
                raise ValueError(f"unknown grammar kind {spec.kind!r}")
        except (RuntimeError, ValueError) as e:  # json.JSONDecodeError is a ValueError
            raise ValueError(f"the {spec.kind} does not compile: {_message(e)}") from None
        self._compiled[spec] = compiled
        return compiled

    def matcher(self, spec: GrammarSpec) -> Constraint:
        return Constraint(self.compile(spec), self.vocab_size)


class Constraint:
    """One request's walk through its grammar."""

    def __init__(self, compiled, vocab_size: int) -> None:
        import xgrammar as xgr

        self.matcher = xgr.GrammarMatcher(compiled)
        self.vocab_size = vocab_size

    def fill(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the tokens allowed next into bitmask[row] (int32 words on the CPU)."""
        self.matcher.fill_next_token_bitmask(bitmask, row)

    def accept(self, token: int) -> bool:
        """Advance by a sampled token; False if the grammar does not allow it (the mask should have made it
        impossible: a bug, or a token the sampler was told to ignore the mask for)."""
        return self.matcher.accept_token(token)

    @property
    def finished(self) -> bool:
        """The grammar is complete and its stop token accepted: nothing more may be generated."""
        return self.matcher.is_terminated()


def _message(error: Exception) -> str:
    """xgrammar's error without the time and C++ source location it starts with."""
    return re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", str(error)).strip()


def allocate_bitmask(rows: int, vocab_size: int) -> torch.Tensor:
    """[rows, ceil(vocab / 32)] int32 on the CPU, every token allowed (-1: all 32 bits set)."""
    return torch.full((rows, (vocab_size + 31) // 32), -1, dtype=torch.int32)


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """A new tensor: the logits with every token not allowed by its row's bitmask set to -inf, for the batch rows
    `rows` (the constrained ones; bitmask[i] is rows[i]'s); other rows bit for bit. `logits` itself is never written:
    the engine reads chapter 24's log-probabilities, the model's own, from that same tensor after sampling (unlike
    xgrammar's apply_token_bitmask_inplace). logits [B, vocab] float32, bitmask [R, words] int32 on the logits'
    device, rows [R] int64."""
    # TODO(ch25): unpack the bits: token t of a row is allowed when bit (t % 32) of word t // 32 is set (the words
    # are int32, so bit 31 is the sign bit: shift right and mask with 1, which works for negative words too).
    # Positions past the vocabulary's end in the last word are ignored. Return a new tensor in which the disallowed
    # tokens of the constrained rows are -inf and every other entry is as in `logits`; write nothing into `logits`
    # (no indexed assignment, no masked_fill_ or index_copy_: the engine reads the logprobs from it afterwards).
    raise NotImplementedError("TODO(ch25): apply_token_bitmask")
