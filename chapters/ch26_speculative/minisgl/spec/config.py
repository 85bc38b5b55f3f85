"""SpecConfig: how a scheduler speculates (chapter 26), checked before any engine exists."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from pathlib import Path

METHODS = ("ngram", "draft", "eagle")


@dataclass(frozen=True)
class SpecConfig:
    """Speculative decoding: each decode step, a proposer guesses up to `num_tokens` next tokens of every running
    request and the model checks them all in one forward pass.

    method "ngram" (prompt lookup): the guesses are what followed the latest earlier occurrence of the request's
    last min_n..max_n tokens in its own prompt and output; no second model. method "draft": a small model with the
    same vocabulary (draft_model_path) proposes them one decode step at a time. method "eagle": a one-layer head
    trained on the target's own hidden states (draft_model_path: the folder `make draft` writes) proposes them."""

    method: str = "ngram"
    num_tokens: int = 4  # k: draft tokens per request and step (SGLang's --speculative-num-draft-tokens counts one
    # more, the token the step starts from; ours counts the guesses only, as vLLM's num_speculative_tokens does)
    min_n: int = 1  # n-gram window: the shortest suffix looked up (SGLang's min match window, vLLM's prompt_lookup_min)
    max_n: int = 3  # ...and the longest, tried first
    draft_model_path: str | Path | None = None  # "draft": a model folder (config.json); "eagle": a head (eagle.json)
    backoff: bool = True  # steps that gain nothing (no draft found, or every draft rejected) make the next few plain
    # decode steps, run with overlap (scheduler/speculate.py)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"SpecConfig.method must be one of {', '.join(METHODS)}, got {self.method!r}")
        for name in ("num_tokens", "min_n", "max_n"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"SpecConfig.{name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.backoff, bool):
            raise ValueError(f"SpecConfig.backoff must be True or False, got {self.backoff!r}")
        if self.max_n < self.min_n:
            raise ValueError(f"SpecConfig.max_n ({self.max_n}) must be >= SpecConfig.min_n ({self.min_n})")
        if self.method in ("draft", "eagle"):
            need = "config.json" if self.method == "draft" else "eagle.json"
            what = "a model folder" if self.method == "draft" else "an EAGLE head folder, made by `make draft`"
            if self.draft_model_path is None:
                raise ValueError(f"SpecConfig.draft_model_path is needed for method {self.method!r} ({what})")
            if not (Path(self.draft_model_path) / need).is_file():
                raise ValueError(f"SpecConfig.draft_model_path {str(self.draft_model_path)!r} is not {what} "
                                 f"(it has no {need})")
        elif self.draft_model_path is not None:
            raise ValueError(f"SpecConfig.draft_model_path is only for method 'draft' or 'eagle'; method "
                             f"{self.method!r} proposes from the request's own tokens")
