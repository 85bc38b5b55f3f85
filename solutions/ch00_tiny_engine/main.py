"""Chapter 0 example: the one-file engine matches Hugging Face greedy, writes English, and shows why a KV cache matters.

    make run CH=0 SOL=1                        # tiny-qwen3 against HF, then SmolLM2-135M-Instruct
    MODEL=path/to/Qwen3-0.6B make run CH=0     # any Qwen3 / Llama folder for parts 2 and 3
"""

from __future__ import annotations

import copy
import os
import sys
import time
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

from tiny_engine import TinyEngine
from tools.models import ensure_model, model_path_from_env

TINY_PROMPTS = ["The scheduler picks which requests run next", "Once upon a time, in a small kitchen by the sea,"]
CHAT_PROMPT = "Write one sentence about the ocean."
CONTEXTS = (32, 64, 128, 256)

if threads := int(os.environ.get("MINISGL_CPU_THREADS", "0")):  # 0: torch's default
    torch.set_num_threads(threads)
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()


def hf_greedy(model, ids: list[int], n: int, eos_ids: tuple[int, ...]) -> list[int]:
    """Hugging Face greedy continuation: n tokens, or fewer when one of eos_ids comes (it is kept)."""
    config = copy.deepcopy(model.generation_config)
    config.do_sample, config.max_new_tokens = False, n
    config.temperature = config.top_p = config.top_k = None
    config.eos_token_id = list(eos_ids)
    config.pad_token_id = config.pad_token_id if config.pad_token_id is not None else 0
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             generation_config=config)
    return out[0, len(ids):].tolist()


def load_hf(path: Path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def part1_tiny() -> bool:
    path = ensure_model("tiny-qwen3")
    engine, tok, hf = TinyEngine(path), AutoTokenizer.from_pretrained(path), load_hf(path)
    eos = engine.config.eos_ids
    print("== 1. tiny-qwen3 (random weights): our engine against Hugging Face greedy, 16 tokens each")
    ok = True
    for text in TINY_PROMPTS:
        ids = tok.encode(text)
        ours = engine.generate(ids, 16, eos_ids=list(eos))
        same = ours == hf_greedy(hf, ids, 16, eos)
        ok &= same
        print(f"prompt    {text!r} ({len(ids)} tokens)")
        print(f"continues {tok.decode(ours)!r}")
        print(f"matches HF greedy: {same}\n")
    return ok


def chat_ids(tok, text: str) -> list[int]:
    if tok.chat_template:
        return list(tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False))
    return tok.encode(text)


def part2_chat(path: Path, engine: TinyEngine) -> tuple[bool, list[int]]:
    tok = AutoTokenizer.from_pretrained(path)
    ids = chat_ids(tok, CHAT_PROMPT)
    eos = engine.config.eos_ids
    print(f"== 2. {path.name}: a chat answer (greedy, at most 30 tokens, stops at EOS {list(eos)})")
    engine.generate(ids[:4], 2)  # warm-up: the first call of a torch op is slower
    start = time.perf_counter()
    ours = engine.generate(ids, 30, eos_ids=list(eos))
    seconds = time.perf_counter() - start
    same = ours == hf_greedy(load_hf(path), ids, 30, eos)
    print(f"user:      {CHAT_PROMPT}")
    print(f"assistant: {tok.decode(ours, skip_special_tokens=True).strip()}")
    print(f"{len(ids)} prompt tokens, {len(ours)} new tokens in {seconds:.2f} s "
          f"({len(ours) / seconds:.1f} tokens/s, prefill included)")
    print(f"matches HF greedy: {same}\n")
    return same, ids + ours


def ms(fn, repeat: int) -> float:
    """Best of `repeat` runs, in milliseconds (the minimum is the least disturbed by other processes)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return min(times)


def part3_kv_cache(engine: TinyEngine, seq: list[int]) -> None:
    cfg = engine.config
    print("== 3. why a KV cache: the cost of ONE more token once the sequence holds `context` tokens")
    print(f"{'context':>8} {'with cache':>12} {'recompute all':>15} {'speedup':>8} {'KV cache':>10}")
    for n in CONTEXTS:
        ids = (seq * (n // len(seq) + 2))[: n + 1]
        engine.forward(ids[:n], start_pos=0)  # prefill n tokens into the cache (not timed)
        pos = iter(range(n, n + 5))
        cached = ms(lambda: engine.forward(ids[n:], start_pos=next(pos)), 5)  # feed 1 token, attend to ~n
        full = ms(lambda: engine.forward(ids, start_pos=0), 2)  # no cache: all n + 1 tokens again
        kv_bytes = 2 * cfg.num_layers * n * cfg.num_kv_heads * cfg.head_dim * 4  # k and v, float32
        print(f"{n:>8} {cached:>9.1f} ms {full:>12.1f} ms {full / cached:>7.1f}x {kv_bytes / 2**20:>7.1f} MiB")
    print("With the cache a decode step computes one token; without it, step t recomputes all t tokens, so N\n"
          "tokens cost O(N^2) token-forwards instead of O(N). The speedup is below the token ratio because a\n"
          "one-token forward is dominated by reading every weight once. The price is memory: the last column.")


def main() -> int:
    ok = part1_tiny()
    path = model_path_from_env("smollm2")
    engine = TinyEngine(path)
    same, seq = part2_chat(path, engine)
    part3_kv_cache(engine, seq)
    if not (ok and same):
        print("\nFAILED: the engine's greedy output differs from Hugging Face's")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
