"""Chapter 9 example: a radix tree of cached prefixes, and what it saves when prompts share a system prompt."""

import time

import torch

from minisgl.core import SamplingParams
from minisgl.kvcache.radix_cache import RadixCache
from minisgl.llm import LLM
from tools.models import model_path_from_env


def show(node, depth=0):
    for child in node.children.values():
        lock = f" locked x{child.ref_count}" if child.ref_count else ""
        print(f"  {'    ' * depth}+- {child.key} -> slots {child.value.tolist()}{lock}")
        show(child, depth + 1)


print("== a radix tree, token by token (page size 1)")
tree = RadixCache()
tree.insert_prefix([1, 2, 3, 4], torch.arange(100, 104, dtype=torch.int32))
tree.insert_prefix([1, 2, 5], torch.arange(200, 203, dtype=torch.int32))  # splits [1,2,3,4] after [1,2]
tree.insert_prefix([7, 8], torch.arange(300, 302, dtype=torch.int32))
handle, slots = tree.match_prefix([1, 2, 5, 6])
tree.lock_handle(handle)
show(tree.root)
print(f"  match [1, 2, 5, 6] -> {handle.cached_len} tokens cached, slots {slots.tolist()}")
print(f"  evictable {tree.evictable_size} slots, protected {tree.protected_size}; evict 2 ->",
      sorted(tree.evict(2).tolist()), "(the least recently used unlocked leaf)\n")

path = model_path_from_env("smollm2")
system = ("You are a museum guide in Paris. You answer visitors' questions in one or two friendly sentences, "
          "you never invent opening hours, and you suggest a nearby cafe when someone looks tired.")
questions = ["Where is the Mona Lisa?", "Is the museum big?", "Can I take photos?", "I am tired."]
print(f"== four chat requests sharing a {len(system.split())}-word system prompt (SmolLM2)")
runs = {}
for cache_type in ("naive", "radix"):
    llm = LLM(path, max_running_reqs=4, max_seq_len=512, cache_type=cache_type)
    prompts = [llm.tokenizer.apply_chat_template([{"role": "system", "content": system},
                                                  {"role": "user", "content": q}],
                                                 add_generation_prompt=True, tokenize=True, return_dict=False)
               for q in questions]
    computed = []
    llm.scheduler.on_batch = lambda b: computed.extend(r.extend_len for r in b.reqs if b.is_prefill)
    params = SamplingParams(max_tokens=16)
    t0 = time.perf_counter()
    outputs = llm.generate(prompts[:1], params) + llm.generate(prompts[1:], params)  # one arrives first
    elapsed = time.perf_counter() - t0
    print(f"  {cache_type:>5}: {sum(len(p) for p in prompts)} prompt tokens, {sum(computed)} computed, "
          f"{elapsed:.2f} s")
    llm.scheduler.check_integrity()
    runs[cache_type] = (computed, [o["token_ids"] for o in outputs])
(naive_computed, naive_ids), (radix_computed, radix_ids) = runs["naive"], runs["radix"]
print(f"  the three later prompts: {sum(naive_computed[1:])} new KV slots without the cache, "
      f"{sum(radix_computed[1:])} with it")
print(f"  the same answers (token ids) in both runs: {naive_ids == radix_ids}")
print(f"  first answer: {outputs[0]['text'].strip()!r}")
