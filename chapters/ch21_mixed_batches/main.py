"""Chapter 21 example: two requests are decoding when a long prompt arrives. Without mixing they wait for every
chunk of its prefill; with mixing they decode inside each chunk's batch. Both runs are checked against HF."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.scheduler.prefill import ChunkedReq
from minisgl.scheduler.utils import PendingReq
from tools.models import model_path_from_env

path = model_path_from_env("smollm2")
BUDGET = 32
tokenizer = AutoTokenizer.from_pretrained(path)
texts = ["The three primary colors are", "Water boils at",
         "Paged attention stores the keys and values of every request in fixed-size blocks, so memory is "
         "allocated on demand and shared prefixes can be reused across requests without copying. A scheduler "
         "then decides, step after step, which requests run together: new prompts are cut into chunks that fit "
         "a token budget, and the requests that already have their first token decode one token per step. The "
         "question this chapter asks is what those decoding requests do while a long prompt is being read, and"]
prompts = [tokenizer.encode(t) for t in texts]
outputs_len = [10, 10, 4]
print(f"prompts of {[len(p) for p in prompts]} tokens, max_extend_tokens = {BUDGET}; "
      "the long prompt arrives once the short ones have 2 tokens\n")


def describe(batch) -> str:
    parts = []
    for r in batch.reqs:
        if r.extend_len > 1:
            parts.append(f"{r.uid}[{r.cached_len}:{r.device_len}]{' chunk' if isinstance(r, ChunkedReq) else ''}")
        else:
            parts.append(f"{r.uid}+1")
    return f"{batch.phase:<7} {sum(r.extend_len for r in batch.reqs):>3} tokens: " + ", ".join(parts)


def run(mixed: bool) -> tuple[dict[int, list[int]], list[str], int]:
    """The arrival scenario: the outputs, the batch trace, and the most batches a short request waited between
    two of its tokens (counted in batches, not seconds: the same on every machine)."""
    # A fresh engine each time: the radix cache of the first run would serve the long prompt to the second.
    sched = LLM(path, max_running_reqs=4, max_seq_len=512, max_extend_tokens=BUDGET, enable_mixed_chunk=mixed).scheduler
    trace, steps = [], {0: [], 1: []}  # steps[uid]: the batch count when each of its tokens arrived
    sched.on_batch = lambda batch: trace.append(describe(batch))
    sched.on_token = lambda req, _: steps[req.uid].append(len(sched.history)) if req.uid in steps else None
    for uid in (0, 1):
        ids = torch.tensor(prompts[uid], dtype=torch.int32)
        sched.add_request(PendingReq(uid, ids, SamplingParams(max_tokens=outputs_len[uid], ignore_eos=True)))

    def arrive() -> None:
        if min(len(t) for t in steps.values()) >= 2 and not arrive.done:
            arrive.done = True
            ids = torch.tensor(prompts[2], dtype=torch.int32)
            sched.add_request(PendingReq(2, ids, SamplingParams(max_tokens=outputs_len[2], ignore_eos=True)))

    arrive.done = False
    sched.run_until_idle(arrive)
    sched.check_integrity()
    outputs = {uid: sched.finished.pop(uid).output_ids for uid in range(3)}
    gap = max(b - a for t in steps.values() for a, b in zip(t, t[1:]))
    return outputs, trace, gap


hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
want = []
for prompt, n in zip(prompts, outputs_len):
    with torch.inference_mode():
        want.append(hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                do_sample=False, max_new_tokens=n, min_new_tokens=n)[0, len(prompt):].tolist())

match = True
for mixed in (False, True):
    outputs, trace, gap = run(mixed)
    print(f"enable_mixed_chunk={mixed}")
    for i, line in enumerate(trace[:9]):
        print(f"  batch {i:>2}  {line}")
    print(f"  ... {len(trace)} batches in all")
    ok = all(outputs[uid] == want[uid] for uid in range(3))
    match &= ok
    waited = f"{gap} batch{'es' if gap > 1 else ''}"
    print(f"  longest wait of a short request between two of its tokens: {waited}; matches HF greedy: {ok}\n")
print(f"'{texts[0]}' -> {tokenizer.decode(want[0])!r}")
raise SystemExit(0 if match else 1)
