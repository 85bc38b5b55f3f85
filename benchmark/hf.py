"""Hugging Face transformers as two systems of the benchmark, each with per-token timestamps.

    hf-static  `generate`: one static batch of every prompt, left-padded, run to the longest output
    hf-cb      transformers' continuous batching (`init_continuous_batching`, what `generate_batch` uses)

Each is a context manager that loads the model once and yields run(): the whole workload once, every request
at the run's t = 0, returning a RunOutput as our engine's driver does (minisgl.benchmark.driver). run() can be
called again: runs.measure throws the first away and times the next ones, as for every system.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from tqdm import tqdm

from minisgl.benchmark.driver import RunOutput, Skipped, progress_bar, sync
from minisgl.benchmark.metrics import RequestTrace
from minisgl.benchmark.workload import Workload, describe
from minisgl.env import ENV

SYSTEMS = ("hf-static", "hf-cb")


def _hf_model(model_path, device: torch.device, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype, attn_implementation="sdpa")
    return model.to(device).eval()


@contextmanager
def hf_static(model_path, workload: Workload, device: torch.device, dtype: torch.dtype,
              pad_id: int = 0) -> Iterator[Callable[[], RunOutput]]:
    """`generate` on one left-padded batch of every prompt, for max(output lengths) steps, EOS ignored.

    Every row runs to the longest output; request i's useful tokens are its first n_i, and those are all
    that count. A stopping criterion that never stops is called after every step and timestamps it."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    model = _hf_model(model_path, device, dtype)
    config = copy.deepcopy(model.generation_config)
    config.do_sample, config.temperature, config.top_p, config.top_k = False, None, None, None
    config.eos_token_id = model.generation_config.eos_token_id = None  # EOS is an ordinary token
    config.pad_token_id = pad_id
    width = max(len(ids) for ids, _ in workload)
    ids = torch.full((len(workload), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (prompt, _) in enumerate(workload):
        ids[i, width - len(prompt):] = torch.tensor(prompt)
        mask[i, width - len(prompt):] = 1
    ids, mask = ids.to(device), mask.to(device)
    longest = max(n for _, n in workload)
    warm = copy.deepcopy(config)
    warm.max_new_tokens, config.max_new_tokens = 4, longest
    with torch.inference_mode():
        model.generate(ids[:2], attention_mask=mask[:2], generation_config=warm)
    run_config = {"batch": len(workload), "padded_prompt_len": width, "steps": longest, "attn": "sdpa",
                  "dtype": str(dtype).removeprefix("torch.")}

    def run() -> RunOutput:
        times: list[float] = []

        class StepClock(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                sync(device)
                times.append(time.perf_counter())
                bar.update(1)
                return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

        with torch.inference_mode():
            sync(device)
            with tqdm(total=longest, desc="hf-static", unit="step", disable=ENV.QUIET) as bar:
                t0 = time.perf_counter()
                out = model.generate(ids, attention_mask=mask, generation_config=config,
                                     stopping_criteria=StoppingCriteriaList([StepClock()]))
                sync(device)
                wall = time.perf_counter() - t0
        if len(times) != longest:
            raise RuntimeError(f"expected a timestamp per step ({longest}), got {len(times)}")
        traces = [RequestTrace(t0, times[:n]) for _, n in workload]
        outputs = [out[i, width : width + n].tolist() for i, (_, n) in enumerate(workload)]
        return RunOutput(traces, wall, outputs, config=dict(run_config))

    try:
        yield run
    finally:
        del model


@contextmanager
def hf_cb(model_path, workload: Workload, device: torch.device, dtype: torch.dtype,
          max_seconds: float | None = None, warmup: bool = True) -> Iterator[Callable[[], RunOutput]]:
    """Hugging Face continuous batching: every request queued at t = 0 with its own max_new_tokens, results
    collected until all finish or max_seconds pass; then a hard stop hands back the partial outputs, whose
    tokens (timestamped by transformers with the same clock) count up to the cut.

    Every run gets a manager of its own (a fresh paged cache: no block of an earlier run can be shared), whose
    CUDA graphs are captured before the clock starts (warmup); the model stays loaded between runs."""
    from transformers import GenerationConfig

    model = _hf_model(model_path, device, dtype)
    if not hasattr(model, "init_continuous_batching"):
        raise Skipped("this version of transformers has no continuous batching")
    shape = describe(workload)
    config = GenerationConfig(do_sample=False, max_new_tokens=shape["max_output_len"], eos_token_id=-1,
                              pad_token_id=0)
    hints = None
    try:
        from transformers.generation.continuous_batching.utils import WorkloadHints

        hints = WorkloadHints(max_prompt_length=shape["max_prompt_len"],
                              max_generated_length=shape["max_output_len"], num_requests=shape["requests"])
    except ImportError:
        pass

    def run() -> RunOutput:
        manager = model.init_continuous_batching(generation_config=config, workload_hints=hints)
        attn = model.config._attn_implementation  # what it switched to for paged attention ("paged|sdpa", ...)
        if warmup:
            manager.warmup()  # captures its CUDA graphs: not part of the timed run
        manager.start()
        results = {}
        with progress_bar(shape["requests"], "hf-cb", unit="req") as bar:
            t0 = time.perf_counter()
            names = [manager.add_request(list(ids), request_id=f"r{i}", max_new_tokens=n, record_timestamps=True,
                                         eos_token_id=-1) for i, (ids, n) in enumerate(workload)]
            while len(results) < len(names):
                left = None if max_seconds is None else t0 + max_seconds - time.perf_counter()
                if left is not None and left <= 0:
                    break
                result = manager.get_result(timeout=1.0 if left is None else min(1.0, left))
                if result is None:
                    if not manager.is_running():
                        break
                elif result.is_finished() and result.error is None:
                    results[result.request_id] = result
                    bar.update(1)
            wall = time.perf_counter() - t0
        capped = len(results) < len(names)
        manager.stop(block=True, timeout=120, hard_stop=capped)
        partial = {}
        while (result := manager.get_result(timeout=0.5)) is not None:  # the outputs a hard stop failed
            partial.setdefault(result.request_id, result)
        traces, outputs = [], []
        for name, (_, n) in zip(names, workload):
            result = results.get(name) or partial.get(name)
            stamps = list((result.timestamps or []) if result is not None else [])[:n]
            traces.append(RequestTrace(t0, [s for s in stamps if s <= t0 + wall]))
            done = name in results and len(result.generated_tokens) >= n
            outputs.append(list(result.generated_tokens[:n]) if done else None)
        run_config = {"api": "init_continuous_batching + add_request", "warmup": warmup,
                      "attn": attn, "dtype": str(dtype).removeprefix("torch."),
                      "max_seconds": max_seconds}
        del manager
        return RunOutput(traces, wall, outputs, config=run_config, capped=capped)

    try:
        yield run
    finally:
        del model


def run_hf_static(model_path, workload: Workload, device: torch.device, dtype: torch.dtype) -> RunOutput:
    """hf-static once (after its short warm-up)."""
    with hf_static(model_path, workload, device, dtype) as run:
        return run()


def run_hf_cb(model_path, workload: Workload, device: torch.device, dtype: torch.dtype,
              max_seconds: float | None = None, warmup: bool = True) -> RunOutput:
    """hf-cb once."""
    with hf_cb(model_path, workload, device, dtype, max_seconds, warmup) as run:
        return run()
