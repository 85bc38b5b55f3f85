"""Chapter 26 example: SmolLM2 answers greedily with and without speculative decoding. Two prompts: one whose
answer repeats text of the prompt (n-gram lookup guesses well there), one ordinary chat question. The answers must
be token for token the same; speculation changes how many forward passes of the model produce them."""

import time

from transformers import AutoTokenizer

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.spec import SpecConfig
from tools.models import ensure_model, model_path_from_env

path = model_path_from_env("smollm2")
tokenizer = AutoTokenizer.from_pretrained(path)
PARAGRAPH = "The scheduler picks which requests run next. A cache of keys and values saves work."
QUESTIONS = [f"Repeat this paragraph word for word: {PARAGRAPH}", "Why do we need sleep?"]
prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True,
                                         return_dict=False) for q in QUESTIONS]
params = [SamplingParams(max_tokens=40), SamplingParams(max_tokens=10)]  # the first answer ends at EOS

RUNS = {"no speculation": None, "n-gram, k=4": SpecConfig("ngram", num_tokens=4)}
if path.name == "smollm2":  # the draft fixture is SmolLM2's first 20 layers: only for SmolLM2 itself
    RUNS["draft model, k=2"] = SpecConfig("draft", num_tokens=2, draft_model_path=ensure_model("smollm2-draft"))
answers = {}
for name, spec in RUNS.items():
    llm = LLM(path, max_running_reqs=4, max_seq_len=512, speculative=spec)
    start = time.perf_counter()
    outputs = llm.generate(prompts, params)
    seconds = time.perf_counter() - start
    answers[name] = [o["token_ids"] for o in outputs]
    # forward passes of the model each request ran in: its prefill, then its decode or verify steps
    passes = [sum(uid in uids for _, uids in llm.scheduler.history) for uid in range(len(prompts))]
    print(f"== {name} ({seconds:.1f} s): " + ", ".join(
        f"request {i}: {len(ids)} tokens in {n} forward passes" for i, (ids, n) in enumerate(zip(answers[name], passes))))
    if spec is not None:
        stats = llm.scheduler.speculation.stats
        print(f"   {stats.verify_steps} verify steps: {stats.proposed} draft tokens proposed, {stats.accepted} "
              f"accepted ({stats.acceptance_rate:.0%})")
        same = answers[name] == answers["no speculation"]
        print(f"   the same answers as without speculation: {same}")
    llm.scheduler.check_integrity()

print()
for question, ids in zip(QUESTIONS, answers["no speculation"]):
    print(f"Q: {question}\nA: {tokenizer.decode(ids, skip_special_tokens=True)!r}\n")
