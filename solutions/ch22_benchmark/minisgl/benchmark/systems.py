"""The systems under test, each run on the same workload with per-token timestamps.

    ours*      our engine (minisgl.llm.LLM) in its best configuration and with one optimisation off at a time
    nano-vllm  in nano_vllm.py: run from a checkout the user points to
    hf-static  Hugging Face `generate`: one static batch of every prompt, left-padded, run to the longest output
    hf-cb      Hugging Face continuous batching (`init_continuous_batching`, what `generate_batch` uses)

Every run returns a RunOutput: one RequestTrace per request (submitted at the run's t = 0), the wall time,
the tokens of the requests that finished, and for our engine the batches it ran (for its schedule's floor).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import itertools
import time
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from minisgl.benchmark.metrics import RequestTrace, TokenClock
from minisgl.benchmark.roofline import Step
from minisgl.benchmark.workload import Workload, describe
from minisgl import env
from minisgl.core import Batch, SamplingParams
from minisgl.env import ENV
from minisgl.scheduler.utils import PendingReq

# name -> (attention backend, overlap scheduling, CUDA graphs, fused Triton kernels of chapter 19, split-K decode
# of chapter 17)
OURS = {
    "ours": ("auto", True, True, True, True),
    "ours-fa": ("fa", True, True, True, True),
    "ours-no-graphs": ("auto", True, False, True, True),
    "ours-no-overlap": ("auto", False, True, True, True),
    "ours-no-fused": ("auto", True, True, False, True),
    "ours-no-splitk": ("auto", True, True, True, False),
    "ours-triton": ("triton", True, True, True, True),
    "ours-torch": ("torch", True, True, True, True),
}
HF = ("hf-static", "hf-cb")
_uids = itertools.count(1 << 40)  # far from LLM.generate's own uids (0, 1, ...), unique within a process


class Skipped(Exception):
    """A system that cannot run here (the reason is recorded in the results instead of a number)."""


@dataclass
class RunOutput:
    traces: list[RequestTrace]
    wall_s: float
    outputs: list[list[int] | None]  # tokens of every request, None for one that did not finish
    steps: list[Step] | None = None  # the batches our engine ran
    phases: list[str] | None = None
    config: dict = field(default_factory=dict)
    capped: bool = False  # stopped at its time limit

    @property
    def completed(self) -> int:
        return sum(o is not None for o in self.outputs)


class BatchLog:
    """Records every batch the scheduler runs: the contexts it reads and the new tokens it computes."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.phases: list[str] = []

    def on_batch(self, batch: Batch) -> None:
        self.steps.append(([r.device_len for r in batch.reqs], sum(r.extend_len for r in batch.reqs)))
        self.phases.append(batch.phase)


def submit(scheduler, workload: Workload) -> list[int]:
    """Queue every request of the workload (all checked first, so a bad one queues none); their uids."""
    pending = [PendingReq(next(_uids), torch.tensor(ids, dtype=torch.int32),
                          SamplingParams(max_tokens=n, ignore_eos=True)) for ids, n in workload]
    for p in pending:
        scheduler.check_request(p)
    for p in pending:
        scheduler.add_request(p)
    return [p.uid for p in pending]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _bar(total: int, name: str):
    return tqdm(total=total, desc=name, unit="tok", disable=ENV.QUIET, smoothing=0.1)


# ----------------------------------------------------------------------------------------------- ours
def ours_config(name: str, device: torch.device, workload: Workload, page_size: int | None = None,
                cuda_graph_max_bs: int = 256) -> tuple[dict, bool]:
    """(LLM keyword arguments, overlap) of one of our configurations.

    The best configuration lets `auto` pick the attention backend (flash-attn prefill with the Triton decode
    kernel where both import; `ours-fa` is flash-attn for decode too), and gives it pages of 256 slots when
    flash-attn is installed (its paged kernels need them; the waste of up to 255 slots per request does not
    matter with 140 GB, and random prompts share no prefix that smaller pages could reuse), else pages of 1.
    """
    backend, overlap, graphs = OURS[name][:3]
    fa = device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None
    if page_size is None:
        page_size = 256 if backend in ("auto", "fa", "hybrid") and fa else 1
    shape = describe(workload)
    kwargs = dict(device=device.type, attention_backend=backend, page_size=page_size,
                  max_running_reqs=shape["requests"], max_seq_len=shape["max_seq_len"])
    if device.type == "cuda":
        kwargs["cuda_graph_max_bs"] = cuda_graph_max_bs if graphs else 0  # 0 turns capture off (chapter 18)
    elif not graphs:
        raise Skipped("turning CUDA graphs off needs a CUDA device; this run has none to turn off")
    return kwargs, overlap


def run_ours(model_path, workload: Workload, name: str = "ours", max_seconds: float | None = None,
             max_extend_tokens: int = 16384, page_size: int | None = None, cuda_graph_max_bs: int = 256,
             device: str | torch.device = "auto", dtype: str = "auto") -> RunOutput:
    """One of our configurations on the workload: warm up, submit everything at t = 0, run to the end (or
    abort what is left after max_seconds)."""
    from minisgl.llm import LLM

    triton_attention = _triton_attention()
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if str(device) == "auto" else device)
    kwargs, overlap = ours_config(name, device, workload, page_size, cuda_graph_max_bs)
    saved_env, saved_splits = env.ENV, triton_attention.MAX_SPLITS if triton_attention else None
    fused, split_k = OURS[name][3:]
    if not fused:  # the fused kernels read the setting at every call (chapter 19)
        env.ENV = dataclasses.replace(saved_env, FUSED_KERNELS="off")
    if not split_k and triton_attention:  # the decode kernel reads its cap on slices at every call (chapter 17)
        triton_attention.MAX_SPLITS = 1
    try:
        return _run_ours(LLM(model_path, max_extend_tokens=max_extend_tokens, overlap=overlap, dtype=dtype,
                             **kwargs), workload, name, max_seconds, max_extend_tokens, device)
    finally:
        env.ENV = saved_env
        if triton_attention:
            triton_attention.MAX_SPLITS = saved_splits


def _run_ours(llm, workload: Workload, name: str, max_seconds: float | None, max_extend_tokens: int,
              device: torch.device) -> RunOutput:
    warm = [ids[:8] for ids, _ in workload[:2]]
    llm.generate(warm, SamplingParams(max_tokens=4, ignore_eos=True))  # kernels compiled, memory allocated
    scheduler, log = llm.scheduler, BatchLog()
    scheduler.on_batch = log.on_batch
    total = sum(n for _, n in workload)
    _sync(device)
    t0 = time.perf_counter()
    uids = submit(scheduler, workload)
    clock = TokenClock(uids, submit=t0)
    scheduler.on_token = clock.on_token
    capped = False

    def on_step() -> None:
        nonlocal capped
        bar.update(clock.count - bar.n)
        if max_seconds is not None and not capped and time.perf_counter() - t0 > max_seconds:
            capped = True  # abort what is left: each aborted request keeps the tokens it has
            for uid in uids:
                scheduler.abort_request(uid)

    with _bar(total, name) as bar:
        scheduler.run_until_idle(on_step)
    _sync(device)
    wall = time.perf_counter() - t0
    scheduler.on_token = scheduler.on_batch = None
    outputs = [scheduler.finished.pop(uid).output_ids if uid in scheduler.finished else None for uid in uids]
    llm.scheduler.check_integrity()
    engine = llm.engine
    config = {"attention_backend": type(engine.attn_backend).__name__, "overlap": scheduler.overlap,
              "page_size": engine.config.page_size, "max_extend_tokens": max_extend_tokens,
              "dtype": engine.config.dtype, "max_running_reqs": engine.config.max_running_reqs,
              "cuda_graph_max_bs": engine.config.cuda_graph_max_bs, "fused_kernels": env.ENV.FUSED_KERNELS,
              "max_decode_splits": getattr(_triton_attention(), "MAX_SPLITS", None)}
    del llm, engine
    return RunOutput(clock.ordered(uids), wall, outputs, log.steps, log.phases, config, capped)


def _triton_attention():
    """Chapter 17's Triton attention module (where split-K's cap on slices lives), or None without triton."""
    try:
        from minisgl.kernel.triton import attention
    except ImportError:
        return None
    return attention


# ----------------------------------------------------------------------------------------------- Hugging Face
def _hf_model(model_path, device: torch.device, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype, attn_implementation="sdpa")
    return model.to(device).eval()


def run_hf_static(model_path, workload: Workload, device: torch.device, dtype: torch.dtype,
                  pad_id: int = 0) -> RunOutput:
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
    times: list[float] = []

    class StepClock(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            _sync(device)
            times.append(time.perf_counter())
            bar.update(1)
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    warm = copy.deepcopy(config)
    warm.max_new_tokens, config.max_new_tokens = 4, longest
    with torch.inference_mode():
        model.generate(ids[:2], attention_mask=mask[:2], generation_config=warm)
        _sync(device)
        with tqdm(total=longest, desc="hf-static", unit="step", disable=ENV.QUIET) as bar:
            t0 = time.perf_counter()
            out = model.generate(ids, attention_mask=mask, generation_config=config,
                                 stopping_criteria=StoppingCriteriaList([StepClock()]))
            _sync(device)
            wall = time.perf_counter() - t0
    if len(times) != longest:
        raise RuntimeError(f"expected a timestamp per step ({longest}), got {len(times)}")
    traces = [RequestTrace(t0, times[:n]) for _, n in workload]
    outputs = [out[i, width : width + n].tolist() for i, (_, n) in enumerate(workload)]
    config = {"batch": len(workload), "padded_prompt_len": width, "steps": longest, "attn": "sdpa",
              "dtype": str(dtype).removeprefix("torch.")}
    del model
    return RunOutput(traces, wall, outputs, config=config)


def run_hf_cb(model_path, workload: Workload, device: torch.device, dtype: torch.dtype,
              max_seconds: float | None = None, warmup: bool = True) -> RunOutput:
    """Hugging Face continuous batching: every request queued at t = 0 with its own max_new_tokens, results
    collected until all finish or max_seconds pass; then a hard stop hands back the partial outputs, whose
    tokens (timestamped by transformers with the same clock) count up to the cut."""
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
    manager = model.init_continuous_batching(generation_config=config, workload_hints=hints)
    attn = model.config._attn_implementation  # what it switched to for paged attention ("paged|sdpa", ...)
    if warmup:
        manager.warmup()  # captures its CUDA graphs: not part of the timed run
    manager.start()
    results = {}
    with _bar(shape["requests"], "hf-cb") as bar:
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
    del manager, model
    return RunOutput(traces, wall, outputs, config=run_config, capped=capped)
