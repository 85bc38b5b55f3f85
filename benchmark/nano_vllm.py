"""nano-vllm as a system of the benchmark: run from a checkout the user points to, never copied into the course.

    make bench SYSTEMS="ours nano-vllm" NANO_VLLM=/path/to/nano-vllm

The runner imports `nanovllm` from that checkout in the benchmark's own process (one process per system, as
`make bench` runs them), loads the same model folder and feeds it the same token-id prompts with nano-vllm's
own published bench settings: CUDA graphs on (`enforce_eager=False`), `max_model_len=4096`, sampling at
temperature 0.6, EOS ignored, one short warm-up request. Its engine loop is driven step by step, exactly what
its `generate` does, so that every output token gets a host timestamp (for TTFT and TPOT) when its step returns.

Run after run in one process (runs.py: the first whole run is a discarded warm-up), each run starts with an
empty prefix cache, as a fresh nano-vllm does: its block manager keeps the hashes of freed blocks, so a repeated
workload would otherwise find its prompts cached and skip their prefill. The prompt tokens each run computes are
counted (RunOutput.prefill_tokens), so a reused prefix would show.

nano-vllm asks the model folder for a tokenizer only to learn the EOS id; the benchmark's random model has
none, so a stand-in that knows the config's EOS id is handed over instead (prompts are token ids anyway).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from minisgl.benchmark.driver import RunOutput, Skipped
from minisgl.benchmark.metrics import RequestTrace
from minisgl.benchmark.workload import Workload

BENCH_SETTINGS = dict(enforce_eager=False, max_model_len=4096)  # nano-vllm's bench.py
TEMPERATURE = 0.6  # nano-vllm's bench.py samples; with EOS ignored the lengths do not depend on it


class EosOnlyTokenizer:
    """What nano-vllm's engine reads from its tokenizer in a token-id run: the EOS id."""

    def __init__(self, eos_token_id: int | None) -> None:
        self.eos_token_id = eos_token_id if eos_token_id is not None else -1

    @classmethod
    def from_pretrained(cls, path, **kwargs) -> EosOnlyTokenizer:
        eos = json.loads((Path(path) / "config.json").read_text()).get("eos_token_id")
        return cls(eos[0] if isinstance(eos, list) else eos)


def import_nano_vllm(checkout: str | None):
    """The `nanovllm` package of the checkout (NANO_VLLM or --nano-vllm), or Skipped saying what is missing."""
    if not checkout:
        raise Skipped("no nano-vllm checkout given (set NANO_VLLM=path or --nano-vllm path)")
    root = Path(checkout).expanduser().resolve()
    if not (root / "nanovllm" / "__init__.py").exists():
        raise Skipped(f"{root} is not a nano-vllm checkout (no nanovllm/__init__.py)")
    sys.path.insert(0, str(root))
    try:
        import nanovllm
        import nanovllm.engine.llm_engine as engine_module
    except ImportError as e:
        raise Skipped(f"nano-vllm does not import here: {e}") from e
    engine_module.AutoTokenizer = EosOnlyTokenizer
    return nanovllm


def checkout_commit(root: str) -> str | None:
    head = Path(root) / ".git" / "HEAD"
    if not head.exists():
        return os.environ.get("NANO_VLLM_COMMIT")  # files without .git (an archive): the commit they came from
    ref = head.read_text().strip()
    if ref.startswith("ref: "):
        target = Path(root) / ".git" / ref[5:]
        return target.read_text().strip() if target.exists() else None
    return ref


def flush_prefix_cache(block_manager) -> int:
    """Forget every cached block (call when no sequence runs), as a fresh BlockManager; the hashes dropped."""
    if block_manager.used_block_ids:
        raise RuntimeError(f"{len(block_manager.used_block_ids)} nano-vllm blocks still in use between runs")
    n = len(block_manager.hash_to_block_id)
    block_manager.hash_to_block_id.clear()
    for block in block_manager.blocks:
        block.hash, block.token_ids = -1, []
    return n


@contextmanager
def nano_vllm(model_path, workload: Workload, checkout: str | None) -> Iterator[Callable[[], RunOutput]]:
    """nano-vllm's LLM built once with its bench settings and warmed up as its bench.py does; yields run()."""
    import torch

    if not torch.cuda.is_available():
        raise Skipped("nano-vllm needs a CUDA device")
    nanovllm = import_nano_vllm(checkout)
    llm = nanovllm.LLM(str(model_path), **BENCH_SETTINGS)
    scheduler = llm.scheduler
    # As its bench: one short request first (its `generate` would decode the output text: no tokenizer here).
    llm.add_request(list(workload[0][0][:8]), nanovllm.SamplingParams(temperature=TEMPERATURE, max_tokens=16))
    while not llm.is_finished():
        llm.step()
    config = {"checkout": str(checkout), "commit": checkout_commit(str(checkout)), **BENCH_SETTINGS,
              "temperature": TEMPERATURE, "kvcache_block_size": scheduler.block_size}

    def run() -> RunOutput:
        flush_prefix_cache(scheduler.block_manager)
        stamps: dict[int, list[float]] = {}
        prefill = 0
        postprocess = scheduler.postprocess

        def timed_postprocess(seqs, token_ids, is_prefill):
            nonlocal prefill
            before = [s.num_completion_tokens for s in seqs]
            if is_prefill:  # the prompt tokens this step computed (a cached block would not be among them)
                prefill += sum(s.num_scheduled_tokens for s in seqs)
            postprocess(seqs, token_ids, is_prefill)
            now = time.perf_counter()  # token_ids are host ints already: the step has finished on the GPU
            for seq, n in zip(seqs, before):
                if seq.num_completion_tokens > n:
                    stamps.setdefault(seq.seq_id, []).append(now)

        scheduler.postprocess = timed_postprocess
        try:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            seq_ids = []
            for ids, n in workload:
                llm.add_request(list(ids), nanovllm.SamplingParams(temperature=TEMPERATURE, ignore_eos=True,
                                                                   max_tokens=n))
                seq_ids.append(scheduler.waiting[-1].seq_id)
            outputs: dict[int, list[int]] = {}
            while not llm.is_finished():
                finished, _ = llm.step()
                outputs.update(finished)
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
        finally:
            scheduler.postprocess = postprocess
        traces = [RequestTrace(t0, stamps.get(i, [])) for i in seq_ids]
        return RunOutput(traces, wall, [outputs.get(i) for i in seq_ids], config=dict(config), prefill_tokens=prefill)

    try:
        yield run
    finally:
        del llm


def run_nano_vllm(model_path, workload: Workload, checkout: str | None) -> RunOutput:
    """nano-vllm once, after its own short warm-up (its bench.py's protocol)."""
    with nano_vllm(model_path, workload, checkout) as run:
        return run()


def default_checkout() -> str | None:
    return os.environ.get("NANO_VLLM") or None
