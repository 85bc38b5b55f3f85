"""Chapter 28 example: two chat sessions take turns on a KV pool that holds one session's system prompt at a time.
With the radix cache alone each turn recomputes its system prompt (the other session evicted it); with the host tier
the evicted prompt waits in host memory and is loaded back before the turn's prefill. The answers of both engines
are the same tokens."""

from transformers import AutoTokenizer

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from tools.models import model_path_from_env

MAX_TOKENS = 12
SYSTEMS = ["You are a patient geography teacher. Answer in one short sentence, name the country first, and never "
           "use lists. Prefer facts a school atlas would print, and say so when you are not sure.",
           "You are a terse kitchen assistant. Answer in one short sentence with quantities in grams, and never use "
           "lists. If a recipe needs an oven, give the temperature in degrees Celsius."]
TURNS = [(0, "What is the capital of France?"), (1, "How much flour goes into a small loaf?"),
         (0, "Which river flows through Vienna?"), (1, "How long do I boil an egg?")]
ENGINE = dict(device="cpu", dtype="float32", max_seq_len=256, page_size=16, num_pages=5, overlap=False)


def run(llm: LLM, prompts: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """Each turn after the last one (a session's next turn arrives once the other has answered)."""
    answers, cached = [], []
    for ids in prompts:
        before = llm.scheduler.prefill_manager.cached_tokens
        answers.append(llm.generate([ids], SamplingParams(max_tokens=MAX_TOKENS))[0]["token_ids"])
        cached.append(llm.scheduler.prefill_manager.cached_tokens - before)
    return answers, cached


if __name__ == "__main__":
    path = model_path_from_env("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompts = [tokenizer.apply_chat_template([{"role": "system", "content": SYSTEMS[s]},
                                              {"role": "user", "content": q}], add_generation_prompt=True,
                                             tokenize=True, return_dict=False) for s, q in TURNS]
    print(f"device KV pool: {ENGINE['num_pages']} pages of {ENGINE['page_size']} tokens; prompts of "
          f"{[len(p) for p in prompts]} tokens")
    radix_answers, radix_cached = run(LLM(path, **ENGINE), prompts)
    llm = LLM(path, **ENGINE, enable_hierarchical_cache=True, hicache_ratio=4.0, hicache_write_policy="write_through")
    answers, cached = run(llm, prompts)
    for i, (s, q) in enumerate(TURNS):
        print(f"turn {i} (session {s}) cached tokens: radix only {radix_cached[i]:3d}, with the host tier "
              f"{cached[i]:3d} | {q} -> {tokenizer.decode(answers[i]).strip()!r}")
    status = llm.scheduler.status()
    print(f"host tier: {status['loaded_tokens']} tokens loaded back, {status['backed_up_tokens']} backed up, "
          f"{status['host_only_tokens']} on the host only now")
    llm.scheduler.check_integrity()
    same = answers == radix_answers
    print(f"answers equal with and without the host tier: {same}")
    assert same, "the host tier changed an answer"
