"""Chapter 16 example: tensor parallelism on the CPU (gloo). SmolLM2-135M has 9 query heads and 3 KV heads,
so it splits across 3 ranks but not 2. The same prompts with tp_size 1 and 3 give the same tokens, and a
tp_size that does not divide the heads is refused before any process starts."""

import time

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.models import ModelConfig
from tools.models import model_path_from_env


def main() -> int:
    path = model_path_from_env("smollm2")
    mc = ModelConfig.from_path(path)
    print(f"{path.name}: {mc.num_qo_heads} query heads, {mc.num_kv_heads} KV heads, "
          f"intermediate size {mc.intermediate_size}, vocabulary {mc.vocab_size}")
    try:
        LLM(path, tp_size=2)
    except ValueError as e:
        print(f"tp_size=2 refused: {e}")
    questions = ["What is the capital of France?", "Name a primary color.", "Say hello."]
    params = SamplingParams(max_tokens=16)
    outputs = {}
    for tp in (1, 3):
        t0 = time.perf_counter()
        llm = LLM(path, max_running_reqs=4, max_seq_len=256, tp_size=tp)
        started = time.perf_counter() - t0
        prompts = [llm.tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                                     tokenize=True, return_dict=False) for q in questions]
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params)
        print(f"== tp_size {tp}: {tp} rank process{'es' if tp > 1 else ' (this one)'}, started in "
              f"{started:.1f} s, generated in {time.perf_counter() - t0:.1f} s")
        for q, o in zip(questions, outs):
            print(f"  {q:<32} -> {o['text'].strip()[:48]!r}")
        outputs[tp] = [o["token_ids"] for o in outs]
        llm.shutdown()
    same = outputs[1] == outputs[3]
    print(f"tp_size 3 gives the same tokens as tp_size 1: {same}")
    return 0 if same else 1


if __name__ == "__main__":  # the rank processes are spawned: they import this file without running main()
    raise SystemExit(main())
