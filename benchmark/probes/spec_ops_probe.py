"""Probe for chapter 26: torch operations a step issues outside the model, decode against verify.

    python -m benchmark.probes.spec_ops_probe                       # tiny-qwen3, pages of 256, verify graphs
    python -m benchmark.probes.spec_ops_probe --page-size 1 --graphs 0 --top 8

On a GPU each operation outside the model is a kernel launch or a copy the host queues one by one, about as much host
time each; the count is what the host adds to a step, and unlike a time it is the same on a busy machine as on an
idle one. Every row gets k drafts that are all wrong (the replay proposer of spec_probe at rate 0), so each verify
step is a whole step of k drafts yielding one token a row. Runs on the final reference tree.
"""

from __future__ import annotations

import argparse
import collections

from torch.utils._python_dispatch import TorchDispatchMode

from benchmark.probes.spec_probe import ReplayProposer, prompts_for
from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.spec import SpecConfig
from tools.models import model_path_from_env


class OpCounter(TorchDispatchMode):
    """Counts the aten operations dispatched while `counting` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.counting, self.ops = True, collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.counting:
            self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def ops_per_step(llm: LLM, prompts: list[list[int]], params: SamplingParams) -> tuple[float, collections.Counter]:
    """Operations a step outside the model's forward (which runs uncounted), over one whole run."""
    counter, model = OpCounter(), llm.engine.model
    forward = model.forward

    def uncounted(*args, **kwargs):
        counter.counting = False
        try:
            return forward(*args, **kwargs)
        finally:
            counter.counting = True

    model.forward = uncounted
    try:
        with counter:
            llm.generate(prompts, params)
    finally:
        del model.forward  # the class's method again
    steps = len(llm.scheduler.history)
    return sum(counter.ops.values()) / steps, counter.ops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a model folder (default: $MODEL, else the tiny-qwen3 fixture)")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--page-size", type=int, default=256)
    ap.add_argument("--graphs", type=int, default=8, help="cuda_graph_max_bs (graphs are replayed eagerly on the CPU)")
    ap.add_argument("--top", type=int, default=0, help="also list the most frequent operations")
    args = ap.parse_args()
    path = args.model or model_path_from_env("tiny-qwen3")
    rows, seq = max(args.batch), 64 + args.tokens + args.k + 64
    common = dict(page_size=args.page_size, max_seq_len=seq, max_running_reqs=rows, cuda_graph_max_bs=args.graphs,
                  num_pages=rows * -(-seq // args.page_size) + 8)
    plain, spec = LLM(path, **common), LLM(path, speculative=SpecConfig("ngram", args.k, backoff=False), **common)
    vocab = plain.engine.model_config.vocab_size
    params = SamplingParams(max_tokens=args.tokens, ignore_eos=True)
    for batch in args.batch:
        prompts = prompts_for(plain, batch, 64, False)
        answers = {tuple(p): o["token_ids"] for p, o in zip(prompts, plain.generate(prompts, params))}
        spec.scheduler.speculation.proposer = ReplayProposer(answers, 0.0, vocab)
        for name, llm in (("decode", plain), ("verify", spec)):
            per_step, ops = ops_per_step(llm, prompts, params)
            print(f"batch {batch} {name}: {per_step:.1f} torch ops a step outside the model")
            if args.top:
                print("   ", ", ".join(f"{op.split('.')[1]} {n / len(llm.scheduler.history):.1f}"
                                       for op, n in ops.most_common(args.top)))


if __name__ == "__main__":
    main()
