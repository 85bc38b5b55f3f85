"""Chapter 20 example: mixture of experts on tiny-qwen3-moe (8 experts, 2 per token). How layer 0's router shares
the tokens of a prompt out, the experts computed three ways against float64, and the engine (one rank, then
two) generating HF greedy's tokens. On a CPU the Triton kernel runs in its interpreter: right, slow, and no
measure of speed (the H200 numbers come from `python -m benchmark.moe`, the harness beside the package); where
Triton is missing (it has wheels for Linux only) the fused form is left out and the example says why."""

import os
import time

import torch

ON_CUDA = torch.cuda.is_available()
if not ON_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

from transformers import AutoModelForCausalLM  # noqa: E402

from minisgl.core import SamplingParams  # noqa: E402
from minisgl.llm import LLM  # noqa: E402
from minisgl.models import load_model  # noqa: E402
from minisgl.moe import moe_grouped, moe_reference, select_experts  # noqa: E402
from minisgl.moe.fused import fused_moe  # noqa: E402
from tools.models import model_path_from_env  # noqa: E402
from tools.optional import missing  # noqa: E402

DEVICE = "cuda" if ON_CUDA else "cpu"
PROMPTS = ["The router picks two experts for every token", "Paged memory lets many sequences share one pool",
           "Once upon a time, in a small kitchen by the sea,"]


def routing_and_three_forms(path, tok) -> bool:
    model, config = load_model(path, device=DEVICE)
    block = model.model.layers[0].mlp
    print(f"{path.name}: {config.num_experts} experts, top {config.num_experts_per_tok}, expert intermediate size "
          f"{config.moe_intermediate_size}, norm_topk_prob={config.norm_topk_prob}, MoE layers {config.moe_layers}")
    # Layer 0's input: the normed embeddings of one prompt's tokens (what its router sees).
    ids = tok.encode(PROMPTS[2])
    x = model.model.layers[0].input_layernorm(model.model.embed_tokens(torch.tensor(ids, device=DEVICE)), None)[0]
    weights, experts = select_experts(block.gate(x), config.num_experts_per_tok, config.norm_topk_prob)
    load = torch.bincount(experts.flatten(), minlength=config.num_experts).tolist()
    print(f"layer 0 routes the {len(ids)} tokens of {PROMPTS[2]!r}: tokens per expert {load}")
    for t in range(3):
        picks = ", ".join(f"expert {e} x {w:.2f}" for e, w in zip(experts[t].tolist(), weights[t].tolist()))
        print(f"  token {tok.decode([ids[t]])!r:>8}: {picks}")
    w13, w2 = block.experts.gate_up_proj, block.experts.down_proj
    want = moe_reference(x.double(), w13.double(), w2.double(), weights.double(), experts)
    ok = True
    forms = [("loop over experts", moe_reference), ("sorted + grouped", moe_grouped)]
    if missing("triton"):
        print(f"the Triton fused MoE does not run here: {missing('triton')}")
    else:
        forms.append(("Triton fused MoE", fused_moe))
    print(f"layer 0's experts on these tokens, {'three' if len(forms) == 3 else 'two'} ways "
          "(float32; their speed is the H200 table's business):")
    for name, fn in forms:
        got = fn(x, w13, w2, weights, experts)
        err = ((got.double() - want).norm() / want.norm()).item()
        ok &= err < 1e-5
        print(f"  {name:<18} rel error vs float64 {err:.1e}")
    return ok


def generate_matches_hf(path, tok) -> bool:
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompts = [tok.encode(p) for p in PROMPTS]
    want = [hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                        do_sample=False, max_new_tokens=12, min_new_tokens=12,
                        pad_token_id=hf.config.pad_token_id)[0, len(ids):].tolist() for ids in prompts]
    ok = True
    for tp in (1, 2):
        llm = LLM(path, tp_size=tp, device=DEVICE, dtype="float32", max_running_reqs=4, max_seq_len=128,
                  page_size=2, max_extend_tokens=8)
        t0 = time.perf_counter()
        outs = llm.generate(prompts, SamplingParams(max_tokens=12, ignore_eos=True))
        same = [o["token_ids"] == w for o, w in zip(outs, want)]
        print(f"== tp_size {tp}: generated in {time.perf_counter() - t0:.1f} s (8-token prefill chunks, page size 2)")
        for p, o, s in zip(PROMPTS, outs, same):
            print(f"  {p[:30]!r:<33} -> {o['token_ids'][:8]}...  {'= HF greedy' if s else 'DIFFERS FROM HF GREEDY'}")
        ok &= all(same)
        llm.shutdown()
    return ok


if __name__ == "__main__":  # the rank processes are spawned: they import this file without running it
    from transformers import AutoTokenizer

    model_path = model_path_from_env("tiny-qwen3-moe")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    ok = routing_and_three_forms(model_path, tokenizer)
    ok &= generate_matches_hf(model_path, tokenizer)
    print(f"all checks passed: {ok}")
    raise SystemExit(0 if ok else 1)
