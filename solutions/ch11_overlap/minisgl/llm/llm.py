"""LLM: generate completions for a list of prompts in one call, with continuous batching underneath."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm import tqdm

from minisgl.core import SamplingParams
from minisgl.engine import Engine, EngineConfig
from minisgl.env import ENV
from minisgl.scheduler.scheduler import Scheduler
from minisgl.scheduler.utils import PendingReq

Prompt = str | Sequence[int]


class LLM:
    """LLM(model_path, max_running_reqs=..., max_extend_tokens=..., ...): keyword arguments go to EngineConfig,
    except max_extend_tokens (the prefill token budget of one batch) and overlap (overlap scheduling; default:
    on unless MINISGL_DISABLE_OVERLAP_SCHEDULING is set), which go to the scheduler."""

    def __init__(self, model_path: str | Path, max_extend_tokens: int = 8192, overlap: bool | None = None,
                 **config) -> None:
        self.engine = Engine(EngineConfig(model_path, **config))
        self.scheduler = Scheduler(self.engine, max_extend_tokens, overlap)
        self._tokenizer = None
        self._next_uid = 0

    @property
    def tokenizer(self):
        if self._tokenizer is None:  # loaded on first use: token-id prompts need no tokenizer
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.engine.config.model_path)
        return self._tokenizer

    def _pending(self, prompts: list[Prompt], params: SamplingParams | list[SamplingParams]) -> list[PendingReq]:
        if isinstance(params, SamplingParams) or params is None:
            params = [params or SamplingParams()] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        out = []
        for prompt, p in zip(prompts, params):
            ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
            pending = PendingReq(self._next_uid + len(out), torch.tensor(ids, dtype=torch.int32), p)
            self.scheduler.check_request(pending)  # all checked before any is queued: bad input loses nothing
            out.append(pending)
        return out

    def generate(self, prompts: list[Prompt], sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 ) -> list[dict]:
        """[{"text", "token_ids"}] in the order of `prompts`. Every prompt is checked before any is queued."""
        pending = self._pending(list(prompts), sampling_params)
        for p in pending:
            self.scheduler.add_request(p)
        self._next_uid += len(pending)
        with tqdm(total=len(pending), desc="generate", disable=ENV.QUIET) as bar:
            self.scheduler.run_until_idle(lambda: bar.update(len(self.scheduler.finished) - bar.n))
        reqs = [self.scheduler.finished.pop(p.uid) for p in pending]
        return [{"text": self.tokenizer.decode(r.output_ids, skip_special_tokens=True), "token_ids": r.output_ids}
                for r in reqs]
