"""Chapter 30 example: SmolLM2 answers the course's questions four ways: float32, weight-only INT8 (int8wo), an FP8 KV
cache, and both. Each line shows what the linear layers' weights take and how many KV pages the same 64 MB holds
(speed is `make bench-quant`'s, measured warm over several runs); then the answers, beside float32's. FP8 weights
(--quantization fp8) run on a CPU by dequantizing, which checks the numbers but is slow: the chapter's tests run
them, a GPU with FP8 tensor cores runs them fast."""

from transformers import AutoTokenizer

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from tools.models import model_path_from_env

MAX_TOKENS = 24
QUESTIONS = ["What is the capital of France?", "Name three primary colors.", "What does a CPU do?"]
ENGINE = dict(device="cpu", dtype="float32", max_seq_len=256, max_running_reqs=64, cpu_kv_cache_mb=64, overlap=False)
OPTIONS = {"float32": {}, "int8wo": dict(quantization="int8wo"), "fp8 KV": dict(kv_cache_dtype="fp8_e4m3"),
           "both": dict(quantization="int8wo", kv_cache_dtype="fp8_e4m3")}


def linear_weight_mb(llm: LLM) -> float:
    """Bytes of the decoder's linear layers (weights and their scales): what quantization shrinks."""
    total = sum(t.numel() * t.element_size() for name, t in llm.engine.model.state_dict().items()
                if ".layers." in name and "_proj." in name)
    return total / 2**20


if __name__ == "__main__":
    path = model_path_from_env("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                             tokenize=True, return_dict=False) for q in QUESTIONS]
    answers = {}
    for label, option in OPTIONS.items():
        llm = LLM(path, **ENGINE, **option)
        outs = llm.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
        llm.scheduler.check_integrity()
        answers[label] = [tokenizer.decode(o["token_ids"], skip_special_tokens=True).strip() for o in outs]
        print(f"{label:8s} linear weights {linear_weight_mb(llm):6.1f} MB | KV pages in 64 MB: "
              f"{llm.engine.num_pages:5d}")
    for i, q in enumerate(QUESTIONS):
        print(f"\n{q}")
        for label in OPTIONS:
            same = "  (= float32)" if answers[label][i] == answers["float32"][i] and label != "float32" else ""
            print(f"  {label:8s} {answers[label][i]!r}{same}")
