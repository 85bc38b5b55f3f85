"""Probe for chapter 26: what speculative decoding buys, by batch size, against decoding without it.

    python -m benchmark.probes.spec_probe --out spec.json                              # SmolLM2 on the CPU: none, ngram, draft
    python -m benchmark.probes.spec_probe --out spec.json --device cuda --dtype bfloat16 --batch 1 8 64 \
        --model build/bench/qwen3-0.6b-random --methods none ngram replay  # chapter 22's model on a GPU

Runs on the final reference tree. A batch of --batch requests generates --tokens tokens each (ignore_eos, greedy);
each setting runs --repeat times after one warm-up run. Reported per setting: output tokens/s (median, min, max of
the runs' wall time, the prefill included), verify steps, draft tokens proposed and accepted, and whether the
answers equal those of decoding without speculation; on a GPU the forward's own time by phase (CUDA events), on the
CPU the host's CPU time per step inside and outside the forward passes (run with MINISGL_CPU_THREADS=1).

Methods: "none" (plain decoding, CUDA graphs where the engine has them), "ngram", "draft" and "eagle" (the chapter's
proposers; "draft" takes --draft-model, "eagle" --eagle-head), "nodraft" (a proposer that never finds a draft, as
n-gram lookup on text that repeats nothing: what speculation costs where it never applies), and "replay" at each of --replay-rates: the drafts are the answer plain
decoding gave, each token spoiled with probability 1 - rate (rate 0: every draft wrong, so every verify step of k
drafts yields one token: what a verify step costs). A model with random weights writes text no proposer can
guess; replay gives it a chosen acceptance instead (without the scheduler's backoff, so that every step verifies).
It holds while the answers stay those of plain decoding: in
float32; in bfloat16 a verify pass rounds differently from a decode step, an answer can part from plain decoding's
at a near-tie, and replayed drafts are wrong from there on. The step times of "none" and "replay 0" give the
speed-up at any acceptance a instead: a row gains (1 - a^(k+1)) / (1 - a) tokens a step.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import time
from pathlib import Path

import torch

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.spec import Proposer, SpecConfig, SpecStats
from tools.models import ensure_model, model_path_from_env


class NoDraftProposer(Proposer):
    """Finds nothing, as n-gram lookup does on text that repeats nothing: what speculation costs when it never
    applies (the scheduler's backoff, chapter 26)."""

    def propose(self, reqs, ks):
        self.draft_probs = [None] * len(reqs)
        return [[] for _ in reqs]


class ReplayProposer(Proposer):
    """Proposes the answer plain decoding gave for the request's prompt, each token right with probability `rate`."""

    def __init__(self, answers: dict[tuple[int, ...], list[int]], rate: float, vocab: int, seed: int = 0) -> None:
        self.answers, self.rate, self.vocab, self.rng = answers, rate, vocab, random.Random(seed)
        self.by_uid: dict[int, list[int]] = {}
        self.draft_probs = []

    def propose(self, reqs, ks):
        self.draft_probs = [None] * len(reqs)
        out = []
        for req, k in zip(reqs, ks):
            if req.uid not in self.by_uid:
                prompt = tuple(req.input_ids[: req.prompt_len].tolist())
                self.by_uid[req.uid] = list(prompt) + self.answers[prompt]
            seq, start = self.by_uid[req.uid], len(req.input_ids)
            out.append([t if self.rng.random() < self.rate else (t + 1) % self.vocab for t in seq[start:start + k]])
        return out

    def release(self, req):
        self.by_uid.pop(req.uid, None)

    def reset(self):
        self.by_uid.clear()


def prompts_for(llm: LLM, batch: int, length: int, real_text: bool) -> list[list[int]]:
    if real_text:  # chat questions, some asking to repeat what they quote (where prompt lookup helps)
        tok = llm.tokenizer
        questions = ["Repeat this list exactly: apples, pears, plums, figs, dates, limes, kiwis, grapes.",
                     "What is the capital of France?", "Copy this sentence: the cat sat on the mat by the door.",
                     "Write one sentence about the ocean.", "List the days of the week.", "Why do we need sleep?"]
        return [tok.apply_chat_template([{"role": "user", "content": questions[i % len(questions)]}],
                                        add_generation_prompt=True, tokenize=True, return_dict=False)
                for i in range(batch)]
    rng = random.Random(0)
    vocab = min(llm.engine.model_config.vocab_size, 10000)
    return [[rng.randrange(vocab) for _ in range(length)] for _ in range(batch)]


CPU_S: list[float] = []  # the process's CPU seconds of every run (on a shared machine: what the run itself cost)


def one_run(llm: LLM, prompts: list[list[int]], tokens: int) -> tuple[float, list[list[int]]]:
    params = SamplingParams(max_tokens=tokens, ignore_eos=True)
    if llm.engine.device.type == "cuda":
        torch.cuda.synchronize()
    t0, c0 = time.perf_counter(), time.process_time()
    outs = llm.generate(prompts, params)
    if llm.engine.device.type == "cuda":
        torch.cuda.synchronize()
    CPU_S.append(time.process_time() - c0)
    return time.perf_counter() - t0, [o["token_ids"] for o in outs]


def measure(llm: LLM, prompts, tokens: int, repeat: int, plain: list[list[int]] | None) -> dict:
    """tok/s of whole runs (median, min, max), and the time of one step after the prefill: the median run's wall
    time less that of a run of one token (the prefill alone), over the steps that followed the prefill."""
    one_run(llm, prompts, tokens)  # warm-up: kernels compiled, caches filled
    sched = llm.scheduler
    prefill = statistics.median(one_run(llm, prompts, 1)[0] for _ in range(repeat))
    walls, cpu, same = [], [], True
    spec = sched.speculation  # None without speculation: nothing verified
    if spec is not None:
        spec.stats = SpecStats()
    for _ in range(repeat):
        wall, outs = one_run(llm, prompts, tokens)
        walls.append(wall)
        cpu.append(CPU_S[-1])
        same &= plain is None or outs == plain
    steps = sum(phase != "prefill" for phase, _ in sched.history)  # of the last run (generate clears the history)
    on_cuda = llm.engine.device.type == "cuda"
    forward_ms = forward_times(llm, prompts, tokens) if on_cuda else {}
    host = {} if on_cuda else host_times(llm, prompts, tokens)
    stats = spec.stats if spec is not None else SpecStats()
    rate = len(prompts) * tokens
    return {"tok_s": rate / statistics.median(walls), "tok_s_min": rate / max(walls), "tok_s_max": rate / min(walls),
            "tok_per_cpu_s": rate / statistics.median(cpu), "runs": repeat, "steps": steps, "step_ms": 1e3 * (statistics.median(walls) - prefill) / max(steps, 1),
            "tokens_per_step": (tokens - 1) / max(steps, 1), "verify_steps": stats.verify_steps // repeat,
            "proposed": stats.proposed // repeat, "accepted": stats.accepted // repeat,
            "acceptance": stats.acceptance_rate, "kept_at_draft": [round(x, 3) for x in stats.kept_at()],
            "same_answers_as_plain": same, "forward_ms": forward_ms, **host}


def host_times(llm: LLM, prompts, tokens: int) -> dict[str, float]:
    """On the CPU: the calling thread's CPU time per step (ms, one more run), in the model's forward passes and
    outside them. Outside is the host work a GPU would have to hide (scheduling, proposing, accepting, recording);
    thread time, unlike wall time, does not grow when other processes share the cores. Run with
    MINISGL_CPU_THREADS=1, so that the forward's own work stays on this thread."""
    engine, spent = llm.engine, [0.0]
    forward = engine.forward_logits

    def timed(batch):
        t0 = time.thread_time()
        try:
            return forward(batch)
        finally:
            spent[0] += time.thread_time() - t0

    engine.forward_logits = timed
    try:
        t0 = time.thread_time()
        one_run(llm, prompts, tokens)
        total = time.thread_time() - t0
    finally:
        engine.forward_logits = forward
    steps = max(len(llm.scheduler.history), 1)  # the prefill's included: the same in every method
    return {"host_cpu_ms": 1e3 * (total - spent[0]) / steps, "forward_cpu_ms": 1e3 * spent[0] / steps}


def forward_times(llm: LLM, prompts, tokens: int) -> dict[str, float]:
    """GPU time of the model's forward passes by batch phase (ms, mean over one more run): CUDA events around
    Engine.forward_logits, a graph replay with its input copies. What a step takes beyond it is the host's work
    and the small kernels around the forward (sampling, acceptance)."""
    engine, events = llm.engine, []
    forward = engine.forward_logits

    def timed(batch):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = forward(batch)
        end.record()
        events.append((batch.phase, start, end))
        return out

    engine.forward_logits = timed
    try:
        one_run(llm, prompts, tokens)
    finally:
        engine.forward_logits = forward
    torch.cuda.synchronize()
    by_phase: dict[str, list[float]] = {}
    for phase, start, end in events:
        by_phase.setdefault(phase, []).append(start.elapsed_time(end))
    return {phase: statistics.mean(ms) for phase, ms in by_phase.items() if phase != "prefill"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default=None, help="a model folder (default: $MODEL, else SmolLM2)")
    ap.add_argument("--draft-model", default=None, help="for method draft (default: the smollm2-draft fixture)")
    ap.add_argument("--eagle-head", default=None, help="for method eagle (default: models/smollm2-eagle, made by "
                                                      "`make draft`)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=256, help="random prompts (a model without a chat template)")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--methods", nargs="+", default=["none", "ngram", "draft"])
    ap.add_argument("--replay-rates", type=float, nargs="+", default=[0.5, 0.7, 0.9])
    ap.add_argument("--page-size", type=int, default=None)
    args = ap.parse_args()
    path = Path(args.model) if args.model else model_path_from_env("smollm2")
    real_text = args.model is None
    page = args.page_size or (256 if args.device == "cuda" and args.dtype != "float32" else 1)
    seq = args.prompt_len + args.tokens + args.k + 64
    rows = max(args.batch)
    common = dict(device=args.device, dtype=args.dtype, page_size=page, max_seq_len=seq, max_running_reqs=rows,
                  max_extend_tokens=16384, num_pages=rows * -(-seq // page) + 8,  # every engine its own, small pool
                  cpu_kv_cache_mb=2048)  # on the CPU: room for the draft model's KV regions too
    results = {"model": str(path), "device": args.device, "dtype": args.dtype, "k": args.k, "tokens": args.tokens,
               "page_size": page, "runs": []}
    if args.device == "cuda":
        results["gpu"] = torch.cuda.get_device_name()
    plain_llm = LLM(path, **common)
    spec_llm = (LLM(path, speculative=SpecConfig("ngram", args.k), **common)
                if {"ngram", "replay", "nodraft"} & set(args.methods) else None)
    draft_llm = None
    if "draft" in args.methods:
        draft = args.draft_model or ensure_model("smollm2-draft")
        draft_llm = LLM(path, speculative=SpecConfig("draft", args.k, draft_model_path=draft), **common)
    eagle_llm = None
    if "eagle" in args.methods:
        head = args.eagle_head or ensure_model("smollm2").parent / "smollm2-eagle"
        eagle_llm = LLM(path, speculative=SpecConfig("eagle", args.k, draft_model_path=head), **common)
    ngram = spec_llm.scheduler.speculation.proposer if spec_llm is not None else None
    vocab = plain_llm.engine.model_config.vocab_size
    for batch in args.batch:
        prompts = prompts_for(plain_llm, batch, args.prompt_len, real_text)
        _, plain = one_run(plain_llm, prompts, args.tokens)
        answers = {tuple(p): out for p, out in zip(prompts, plain)}
        for method in args.methods:
            for rate in (args.replay_rates if method == "replay" else [None]):
                llm = {"none": plain_llm, "draft": draft_llm, "eagle": eagle_llm}.get(method, spec_llm)
                if method == "ngram":
                    llm.scheduler.speculation.proposer = ngram
                elif method == "replay":
                    llm.scheduler.speculation.proposer = ReplayProposer(answers, rate, vocab)
                elif method == "nodraft":
                    llm.scheduler.speculation.proposer = NoDraftProposer()
                if llm is spec_llm:
                    speculation = llm.scheduler.speculation
                    speculation.clear()  # each method starts without a backoff
                    if hasattr(speculation.config, "backoff"):  # replayed drafts measure every verify step: none
                        speculation.config = dataclasses.replace(speculation.config, backoff=method != "replay")
                row = {"batch": batch, "method": method if rate is None else f"replay {rate}",
                       **measure(llm, prompts, args.tokens, args.repeat, plain)}
                results["runs"].append(row)
                print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
