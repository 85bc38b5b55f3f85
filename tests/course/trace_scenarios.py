"""Small runs of the engine for the trace tests (tests/course/test_trace.py), on the tiny Qwen3 fixture.

    python tests/course/trace_scenarios.py NAME OUT

runs scenario NAME on the tree first on PYTHONPATH twice, without and then with the recorder, and writes OUT
(JSON): each run's outputs and the scheduler's history of every engine (the last call's batches), the trace,
and whether uninstalling the recorder put the classes back. Each scenario sets up what its chapter's
example shows, at a size the tests can afford: chunks (chapter 10), a radix-cache hit (9), retractions (23),
speculative decoding with a draft model (26), a host KV tier (28).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools import trace_recorder  # noqa: E402
from tools.models import ensure_model  # noqa: E402

MODEL = "tiny-qwen3"


def ids(n: int, start: int = 5) -> list[int]:
    return [start + (7 * k) % 300 for k in range(n)]


def chunked(llms: list) -> list:
    """Chapter 10: prompts of 55, 13 and 3 tokens with a budget of 16 tokens per prefill batch."""
    from minisgl.core import SamplingParams
    from minisgl.llm import LLM

    llm = LLM(ensure_model(MODEL), max_running_reqs=4, max_seq_len=256, max_extend_tokens=16)
    llms.append(llm)
    return llm.generate([ids(55), ids(13, 40), ids(3, 90)], SamplingParams(max_tokens=6, ignore_eos=True))


def radix(llms: list) -> list:
    """Chapter 9: one request, then three that start with its first 24 tokens."""
    from minisgl.core import SamplingParams
    from minisgl.llm import LLM

    llm = LLM(ensure_model(MODEL), max_running_reqs=4, max_seq_len=256)
    llms.append(llm)
    shared = ids(24)
    params = SamplingParams(max_tokens=5, ignore_eos=True)
    first = llm.generate([shared + ids(6, 400)], params)
    return first + llm.generate([shared + ids(4 + k, 500 + 10 * k) for k in range(3)], params)


def retract(llms: list) -> list:
    """Chapter 23: optimistic admission on a pool that holds three requests at their longest."""
    from minisgl.core import SamplingParams
    from minisgl.llm import LLM
    from minisgl.scheduler.retract import NewTokenRatio

    ratio = NewTokenRatio(init=0.3, min_ratio=0.1, decay_steps=50)
    llm = LLM(ensure_model(MODEL), max_running_reqs=6, max_seq_len=128, num_pages=3 * (8 + 24),
              admission="optimistic", new_token_ratio=ratio)
    llms.append(llm)
    return llm.generate([ids(8, 20 * k) for k in range(6)], SamplingParams(max_tokens=24, ignore_eos=True))


def speculative(llms: list) -> list:
    """Chapter 26: greedy decoding with a draft model proposing 3 tokens per step."""
    from minisgl.core import SamplingParams
    from minisgl.llm import LLM
    from minisgl.spec import SpecConfig

    spec = SpecConfig("draft", 3, draft_model_path=ensure_model("tiny-qwen3-draft"))
    llm = LLM(ensure_model(MODEL), max_running_reqs=4, max_seq_len=256, speculative=spec)
    llms.append(llm)
    return llm.generate([ids(12), ids(9, 60)], SamplingParams(max_tokens=16, ignore_eos=True))


def hicache(llms: list) -> list:
    """Chapter 28: two sessions take turns on a device pool that holds one, a host tier under the radix cache: each
    turn's system prompt went to the host while the other session ran, and is loaded back."""
    from minisgl.core import SamplingParams
    from minisgl.llm import LLM

    llm = LLM(ensure_model(MODEL), max_running_reqs=2, max_seq_len=128, page_size=1, num_pages=64,
              enable_hierarchical_cache=True, hicache_write_policy="write_back", hicache_ratio=4.0)
    llms.append(llm)
    systems = [ids(40), ids(40, 600)]
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    return [out for turn in range(4) for out in llm.generate([systems[turn % 2] + ids(5, 300 + 9 * turn)], params)]


SCENARIOS = {"chunked": chunked, "radix": radix, "retract": retract, "speculative": speculative, "hicache": hicache}


def main() -> int:
    """The scenario twice in one process: first with nothing installed, then recorded."""
    name, out = sys.argv[1], Path(sys.argv[2])
    runs = {}
    for recorded in (False, True):
        if recorded:
            trace_recorder.install()
        llms: list = []
        outputs = SCENARIOS[name](llms)
        for llm in llms:
            llm.scheduler.check_integrity()
        runs["on" if recorded else "off"] = {"outputs": [o["token_ids"] for o in outputs],
                                             "history": [[list(h) for h in llm.scheduler.history] for llm in llms]}
    runs["trace"] = trace_recorder.trace_document({"chapter": 0, "tree": "test", "script": name}, 0, None)
    trace_recorder.uninstall()
    from minisgl.scheduler import prefill, scheduler

    runs["restored"] = not hasattr(scheduler.Scheduler.__init__, "__wrapped__") and not hasattr(
        prefill.PrefillAdder.try_add_one, "__wrapped__")
    out.write_text(json.dumps(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
