"""Chapter 31 example: one SmolLM2 serves two LoRA adapters and the base model in the same batches. The adapters are
random (tools/lora.py writes them in PEFT's layout, rank 8 and rank 4): they are not trained, so they change the
answers rather than improve them. Each answer is checked against Hugging Face greedy of PEFT's merged model for its
adapter (the base model for none): each token is the argmax of that model's logits given the tokens before it.
The prefix cache's hits show that a prompt's KV is reused under its own
adapter only."""

import tempfile

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from tools.lora import make_adapter
from tools.models import model_path_from_env

MAX_TOKENS = 16
QUESTION = "What is the capital of France?"
ADAPTERS = {"rank8": dict(rank=8, targets="q,k,v,o,gate,up,down", seed=1, strength=0.15),
            "rank4": dict(rank=4, targets="q,v,down", seed=2, strength=0.3)}


def hf_argmax_agrees(path, folder, ids: list[int], out: list[int]) -> bool:
    """Whether every output token is the argmax of HF's model (PEFT's merged adapter, or the base model) given the
    tokens before it: greedy decoding's definition, checked with one forward pass over prompt + output."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if folder is not None:
        model = PeftModel.from_pretrained(model, folder).merge_and_unload()
    with torch.inference_mode():
        logits = model(torch.tensor([ids + out])).logits[0, len(ids) - 1 : -1]
    return logits.argmax(-1).tolist() == out


if __name__ == "__main__":
    path = model_path_from_env("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(path)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": QUESTION}], add_generation_prompt=True,
                                        tokenize=True, return_dict=False)
    with tempfile.TemporaryDirectory() as tmp:
        folders = {name: str(make_adapter(path, f"{tmp}/{name}", **spec)) for name, spec in ADAPTERS.items()}
        llm = LLM(path, device="cpu", dtype="float32", max_seq_len=256, max_running_reqs=8, overlap=False,
                  enable_lora=True, lora_paths=folders, max_loras_per_batch=2, max_lora_rank=8)
        rows = [None, "rank8", "rank4", "rank8"]
        prefill = llm.scheduler.prefill_manager
        print(f"one batch of {len(rows)} rows: {', '.join(r or 'base' for r in rows)}")
        outs = llm.generate([ids] * len(rows), [SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, lora_name=r)
                                                for r in rows])
        print(f"\n{QUESTION}")
        for name, out in zip(rows, outs):
            same = hf_argmax_agrees(path, folders.get(name), ids, out["token_ids"])
            text = tokenizer.decode(out["token_ids"], skip_special_tokens=True).strip()
            print(f"  {name or 'base':6s} {text!r}  ({'=' if same else '!='} HF greedy)")
        before = prefill.cached_tokens
        llm.generate([ids], SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, lora_name="rank4"))
        print(f"\nthe same prompt under 'rank4' again: {prefill.cached_tokens - before} of {len(ids)} prompt tokens "
              "found in its own cache")
        llm.scheduler.check_integrity()
