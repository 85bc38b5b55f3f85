"""LLM: generate completions for a list of prompts in one call, with continuous batching underneath."""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm import tqdm

from minisgl.core import SamplingParams
from minisgl.distributed import get_tp_info
from minisgl.engine import Engine, EngineConfig
from minisgl.env import ENV
from minisgl.llm.tp import TPGroup, check_tp_config
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.scheduler import Scheduler
from minisgl.scheduler.utils import PendingReq

Prompt = str | Sequence[int]


class LLM:
    """LLM(model_path, max_running_reqs=..., max_extend_tokens=..., ...): keyword arguments that name a field of
    SchedulerConfig (max_extend_tokens, overlap, ...) go to the scheduler, the others to EngineConfig, except
    tp_size. scheduler_config gives the scheduler's settings whole instead.

    tp_size > 1 (chapter 16) runs one process per rank, each with its own engine and scheduler on a slice of
    the model; this object then only tokenizes, hands the work to rank 0 and decodes (engine and scheduler
    are None here). A bad tp_size is a ValueError before any process starts; call shutdown() when done.
    """

    def __init__(self, model_path: str | Path, tp_size: int = 1, scheduler_config: SchedulerConfig | None = None,
                 **kwargs) -> None:
        self.model_path = model_path
        self.tp_size = tp_size
        self.engine: Engine | None = None
        self.scheduler: Scheduler | None = None
        self._group: TPGroup | None = None
        self._tokenizer = None
        self._next_uid = 0
        config = make_scheduler_config(kwargs, scheduler_config)  # checked before any engine or process
        engine_config = EngineConfig(model_path, **kwargs)
        check_tp_config(tp_size, engine_config)
        if tp_size > 1:  # every rank gets the same settings
            rank_args = dict(kwargs, scheduler_config=config)
            self._group = TPGroup(tp_size, type(self), model_path, rank_args, engine_config.device)
            return
        self.engine = Engine(engine_config)
        self.scheduler = Scheduler(self.engine, config)

    @property
    def tokenizer(self):
        if self._tokenizer is None:  # loaded on first use: token-id prompts need no tokenizer
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        return self._tokenizer

    @property
    def rank_processes(self) -> list:
        """The processes of the ranks (tp_size > 1), rank 0 first; empty when this process is the engine."""
        return [] if self._group is None else list(self._group.processes)

    def shutdown(self) -> None:
        """Stop the rank processes (tp_size > 1); a no-op otherwise. The LLM cannot generate afterwards."""
        if self._group is not None:
            self._group.shutdown()

    def _requests(self, prompts: Prompt | list[Prompt], params: SamplingParams | list[SamplingParams] | None,
                  ) -> list[tuple[list[int], SamplingParams]]:
        """(token ids, sampling params) of every prompt: text tokenized, lists and params checked."""
        if isinstance(prompts, str):  # one text prompt, not a list of one-character ones
            prompts = [prompts]
        prompts = list(prompts)
        if isinstance(params, SamplingParams) or params is None:
            params = [params or SamplingParams()] * len(prompts)
        elif not isinstance(params, (list, tuple)):
            raise ValueError(f"sampling_params must be a SamplingParams or a list of them, got {type(params).__name__}")
        if len(params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        return [(self._token_ids(prompt, i), p) for i, (prompt, p) in enumerate(zip(prompts, params))]

    def _pending(self, requests: list[tuple[list[int], SamplingParams]]) -> list[PendingReq]:
        """The requests, numbered, each checked by the scheduler before any is queued: bad input loses nothing."""
        out = []
        for ids, p in requests:
            pending = PendingReq(self._next_uid + len(out), torch.tensor(ids, dtype=torch.int32), p)
            self.scheduler.check_request(pending)
            out.append(pending)
        return out

    def _token_ids(self, prompt: Prompt, index: int) -> list[int]:
        """A prompt as a list of Python ints: text is tokenized; a token-id prompt must hold integers (numpy and
        torch integer scalars, arrays and tensors too), never bools, floats or bytes, each below 2**31
        (ValueError otherwise)."""
        if isinstance(prompt, str):
            try:
                prompt.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"prompt {index} is not valid text: {e.reason} at character {e.start}") from None
            return self.tokenizer.encode(prompt)
        if hasattr(prompt, "tolist"):  # a numpy array or a torch tensor of ids
            prompt = prompt.tolist()
        if isinstance(prompt, (bytes, bytearray)) or not isinstance(prompt, Sequence):
            raise ValueError(f"prompt {index} must be text or a list of token ids, got {type(prompt).__name__}")
        ids = list(prompt)
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, numbers.Integral) or not 0 <= int(t) < 2**31:
                raise ValueError(f"prompt {index}: token id {t!r} is not an integer in [0, 2**31)")
        return [int(t) for t in ids]

    def generate(self, prompts: Prompt | list[Prompt],
                 sampling_params: SamplingParams | list[SamplingParams] | None = None) -> list[dict]:
        """[{"text", "token_ids"}] in the order of `prompts` (one text prompt may stand alone). Every prompt is
        checked before any is queued. If the run fails or is interrupted, its requests are aborted and freed and
        the error goes on; the LLM serves the next call."""
        requests = self._requests(prompts, sampling_params)
        if self._group is not None:
            outputs = self._group.generate(requests)
        else:
            outputs = self._run(self._pending(requests))
        return [{"text": self.tokenizer.decode(ids, skip_special_tokens=True), "token_ids": ids} for ids in outputs]

    def _run(self, pending: list[PendingReq]) -> list[list[int]]:
        """Queue checked requests, run the scheduler until they all finished; their output token ids."""
        self.scheduler.history.clear()  # the batches of the last call only: a long-lived LLM keeps no growing log
        for p in pending:
            self.scheduler.add_request(p)
        self._next_uid += len(pending)
        quiet = ENV.QUIET or not get_tp_info().is_primary  # one progress bar, not one per rank
        with tqdm(total=len(pending), desc="generate", disable=quiet) as bar:
            self.scheduler.run_until_idle(lambda: bar.update(len(self.scheduler.finished) - bar.n))
        return [self.scheduler.take_finished(p.uid).output_ids for p in pending]


def make_scheduler_config(kwargs: dict, given: SchedulerConfig | None = None) -> SchedulerConfig:
    """The scheduler's settings: `given`, or the keyword arguments that name a field of SchedulerConfig, taken out
    of `kwargs` (what is left is EngineConfig's). ValueError if both are given, or for a bad setting."""
    names = {f.name for f in dataclasses.fields(SchedulerConfig)}
    mine = {key: kwargs.pop(key) for key in list(kwargs) if key in names}
    if given is None:
        return SchedulerConfig(**mine)
    if mine:
        raise ValueError(f"give the scheduler's settings as scheduler_config or as keywords, not both: {sorted(mine)}")
    if not isinstance(given, SchedulerConfig):
        raise ValueError(f"scheduler_config must be a SchedulerConfig, got {type(given).__name__}")
    return given
