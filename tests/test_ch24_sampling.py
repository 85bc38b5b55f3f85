"""Chapter 24: the sampling API. Each logits processor against an independent reference on the same logits
(Hugging Face's own processors, OpenAI's formula and log_softmax in float64, frequencies of many draws), rows
without these settings untouched (chapter 6's sampler, bit for bit), whole runs against HF generate, the
log-probabilities of every output token through the scheduler (overlap, retraction), and the server's OpenAI
shapes (n choices, logprobs) read by the official openai client."""

from __future__ import annotations

import asyncio
import collections
import importlib.util
import json
import sys
from pathlib import Path

import httpx
import pytest
import torch

from helpers import CHAT, TEXTS, assert_clean, assert_close, hf_cached, hf_greedy, hf_model, model_path, tokenizer
from minisgl.core import Batch, Req, SamplingParams
from minisgl.engine import Engine, EngineConfig
from minisgl.engine.processors import apply_penalties, min_p_filter
from minisgl.engine.sample import BatchSamplingArgs, Sampler, edit_logits, gather_logprobs
from minisgl.llm import LLM
from minisgl.message import UserReply
from minisgl.server.protocol import ChatCompletionRequest, CompletionRequest
from minisgl.teaching.manual import ManualBatcher

NAME = "tiny-qwen3"
VOCAB = 64
N = 16


def make_req(uid: int, prompt: list[int], output: list[int], pool: torch.Tensor, **params) -> Req:
    """A request of `prompt` that has generated `output` so far, its tokens in row uid of the token pool, as the
    engine keeps them (the sampler counts the penalties there)."""
    ids = torch.tensor(prompt + output, dtype=torch.int32)
    max_tokens = params.pop("max_tokens", len(output) + 8)
    req = Req(ids, uid, len(ids) - 1, max_tokens - len(output), uid, SamplingParams(max_tokens=max_tokens, **params))
    req.prompt_len = len(prompt)
    pool[uid, : len(ids)] = ids
    return req


def random_case(seed: int, rows: int, prompt_len: int = 12, output_len: int = 10):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, VOCAB, generator=g) * 3
    seqs = [(torch.randint(0, VOCAB, (prompt_len,), generator=g).tolist(),
             torch.randint(0, VOCAB, (output_len,), generator=g).tolist()) for _ in range(rows)]
    return logits, seqs, torch.zeros(rows, 64, dtype=torch.int32)


def edited(logits: torch.Tensor, reqs: list[Req], pool: torch.Tensor, eos: tuple[int, ...] = ()) -> torch.Tensor:
    args = BatchSamplingArgs.from_reqs(reqs, "cpu", pool, eos)
    return logits.clone() if args.edits is None else edit_logits(logits.clone(), args.edits)


# --- each processor against its reference ---------------------------------------------------------------------

@pytest.mark.stubs("edit_logits", "apply_penalties")
def test_repetition_penalty_matches_hf_over_the_prompt_and_the_output():
    """HF's RepetitionPenaltyLogitsProcessor reads every token of input_ids, the prompt included (as vLLM's)."""
    from transformers import RepetitionPenaltyLogitsProcessor

    penalties = [1.0, 1.3, 0.7, 2.5]
    logits, seqs, pool = random_case(0, len(penalties))
    reqs = [make_req(i, p, o, pool, repetition_penalty=r) for i, ((p, o), r) in enumerate(zip(seqs, penalties))]
    got = edited(logits, reqs, pool)
    for i, ((p, o), r) in enumerate(zip(seqs, penalties)):
        want = RepetitionPenaltyLogitsProcessor(r)(torch.tensor([p + o]), logits[i : i + 1].clone())[0]
        assert_close(got[i], want, 1e-6, f"row {i} (repetition_penalty {r}) against HF", row="token")


@pytest.mark.stubs("edit_logits", "apply_penalties")
def test_frequency_and_presence_penalties_follow_openais_formula_over_the_output_only():
    """logit - frequency * count - presence * (count > 0), counts of the generated tokens, in float64 by hand; a
    token that only the prompt holds keeps its logit."""
    cases = [(0.0, 0.0), (0.5, 0.0), (0.0, 1.5), (-1.0, 2.0), (2.0, -2.0)]
    logits, seqs, pool = random_case(1, len(cases))
    reqs = [make_req(i, p, o, pool, frequency_penalty=f, presence_penalty=pr)
            for i, ((p, o), (f, pr)) in enumerate(zip(seqs, cases))]
    got = edited(logits, reqs, pool)
    for i, ((p, o), (f, pr)) in enumerate(zip(seqs, cases)):
        want = logits[i].double().clone()
        for token, count in collections.Counter(o).items():
            want[token] -= f * count + pr
        assert_close(got[i], want, 1e-6, f"row {i} (frequency {f}, presence {pr}) against the formula", row="token")
        only_prompt = sorted(set(p) - set(o))
        assert torch.equal(got[i, only_prompt], logits[i, only_prompt]), \
            f"row {i}: tokens {only_prompt} are only in the prompt, yet their logits changed"


@pytest.mark.stubs("edit_logits", "apply_penalties")
def test_repetition_then_openai_penalties_on_one_row():
    """Both kinds together: HF's repetition penalty first, then OpenAI's penalties (vLLM's order)."""
    from transformers import RepetitionPenaltyLogitsProcessor

    logits, seqs, pool = random_case(2, 1)
    (p, o), = seqs
    req = make_req(0, p, o, pool, repetition_penalty=1.4, frequency_penalty=0.3, presence_penalty=0.2)
    want = RepetitionPenaltyLogitsProcessor(1.4)(torch.tensor([p + o]), logits.clone())[0].double()
    for token, count in collections.Counter(o).items():
        want[token] -= 0.3 * count + 0.2
    assert_close(edited(logits, [req], pool)[0], want, 1e-6, "repetition 1.4, frequency 0.3, presence 0.2")


@pytest.mark.stubs("edit_logits", "apply_penalties")
def test_the_edits_run_in_hugging_faces_order_bias_then_penalties_then_the_eos_mask():
    """One row with every edit: logit_bias, the three penalties and min_tokens. The bias moves seen tokens across
    zero, where the repetition penalty (dividing a positive logit, multiplying a negative one) gives another result
    if it runs before the bias. The reference is Hugging Face's processors in generate's order (sequence bias, then
    repetition penalty, then min_new_tokens), with OpenAI's penalties in float64 after the repetition penalty."""
    from transformers import MinNewTokensLengthLogitsProcessor, RepetitionPenaltyLogitsProcessor
    from transformers import SequenceBiasLogitsProcessor

    eos = (3, 7)
    logits, seqs, pool = random_case(9, 1)
    (p, o), = seqs
    seen = sorted(set(p + o) - set(eos))
    bias = {t: (3.0 if logits[0, t] < 0 else -3.0) - float(logits[0, t]) for t in seen}  # each seen logit to -+3
    req = make_req(0, p, o, pool, logit_bias=bias, repetition_penalty=2.0, frequency_penalty=0.3,
                   presence_penalty=0.2, min_tokens=len(o) + 1, max_tokens=len(o) + 8)
    got = edited(logits, [req], pool, eos)[0].double()
    ids = torch.tensor([p + o])

    def openai(row: torch.Tensor) -> torch.Tensor:
        row = row.double().clone()
        for token, count in collections.Counter(o).items():
            row[token] -= 0.3 * count + 0.2
        return row

    biased = SequenceBiasLogitsProcessor({(t,): b for t, b in bias.items()})(ids, logits.clone())
    want = openai(RepetitionPenaltyLogitsProcessor(2.0)(ids, biased)[0])
    want = MinNewTokensLengthLogitsProcessor(len(p), len(o) + 1, list(eos))(ids, want[None])[0]
    assert torch.isneginf(got[list(eos)]).all(), \
        f"min_tokens: {len(o)} of {len(o) + 1} tokens generated, EOS {eos} must be -inf, got {got[list(eos)].tolist()}"
    rest = [t for t in range(VOCAB) if t not in eos]
    bias_after = openai(RepetitionPenaltyLogitsProcessor(2.0)(ids, logits.clone())[0])
    for t, b in bias.items():
        bias_after[t] += b
    if torch.allclose(got[rest], bias_after[rest], rtol=1e-5, atol=1e-5):
        raise AssertionError("logit_bias was added after the penalties: the repetition penalty must see the biased "
                             "logit (Hugging Face and vLLM add the bias first)")
    assert_close(got[rest], want[rest], 1e-6, "bias, repetition 2.0, frequency 0.3, presence 0.2 against HF's "
                 "processors in generate's order", row="token")


@pytest.mark.stubs("min_p_filter")
@pytest.mark.parametrize("min_p", [0.0, 0.05, 0.3, 0.9, 1.0])
def test_min_p_matches_hf(min_p):
    from transformers import MinPLogitsWarper

    logits = torch.randn(6, VOCAB, generator=torch.Generator().manual_seed(3)) * 2
    got = min_p_filter(logits.clone(), torch.full((6,), min_p))
    want = MinPLogitsWarper(min_p)(torch.zeros(6, 1, dtype=torch.long), logits.clone()) if min_p > 0 else logits
    for i in range(6):
        kept, hf_kept = torch.isfinite(got[i]), torch.isfinite(want[i])
        assert torch.equal(kept, hf_kept), (f"min_p {min_p}, row {i}: kept tokens {kept.nonzero().flatten().tolist()}"
                                            f", HF keeps {hf_kept.nonzero().flatten().tolist()}")
        assert torch.equal(got[i][kept], logits[i][kept]), f"min_p {min_p}, row {i}: a kept logit changed"


@pytest.mark.stubs("min_p_filter")
def test_min_p_leaves_rows_at_zero_untouched_bit_for_bit():
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(4))
    got = min_p_filter(logits.clone(), torch.tensor([0.0, 0.5, 0.0]))
    assert torch.equal(got[[0, 2]], logits[[0, 2]]), "rows with min_p 0 must come back unchanged"
    assert torch.isinf(got[1]).any(), "row 1 (min_p 0.5) keeps every token of random logits: no filter ran"


@pytest.mark.stubs("edit_logits")
def test_min_tokens_masks_eos_as_hf_until_enough_tokens_exist():
    from transformers import MinNewTokensLengthLogitsProcessor

    eos = (3, 7)
    logits, seqs, pool = random_case(5, 4)
    logits[:, list(eos)] += 20  # EOS would win everywhere
    mins = [0, 5, 10, 11]  # 10 tokens generated: rows 2 and 3 are still short, row 1 is not
    reqs = [make_req(i, p, o, pool, min_tokens=m, max_tokens=16) for i, ((p, o), m) in enumerate(zip(seqs, mins))]
    got = edited(logits, reqs, pool, eos)
    for i, ((p, o), m) in enumerate(zip(seqs, mins)):
        want = MinNewTokensLengthLogitsProcessor(len(p), m, list(eos))(torch.tensor([p + o]), logits[i : i + 1].clone())
        assert torch.equal(got[i], want[0]), f"row {i} (min_tokens {m}, {len(o)} generated) differs from HF"
    ignore = make_req(0, seqs[0][0], seqs[0][1], pool, min_tokens=11, max_tokens=16, ignore_eos=True)
    assert torch.equal(edited(logits[:1], [ignore], pool, eos), logits[:1]), "with ignore_eos, EOS is not masked"


@pytest.mark.stubs("edit_logits")
def test_logit_bias_adds_to_the_named_tokens_only():
    logits, seqs, pool = random_case(6, 2)
    bias = {0: -100.0, 5: 2.5, 63: 100.0}
    reqs = [make_req(0, *seqs[0], pool, logit_bias=bias), make_req(1, *seqs[1], pool)]
    got = edited(logits, reqs, pool)
    want = logits[0].double().clone()
    for token, b in bias.items():
        want[token] += b
    assert_close(got[0], want, 1e-7, "row 0 with logit_bias")
    assert torch.equal(got[1], logits[1]), "row 1 has no logit_bias and must be untouched"


@pytest.mark.stubs("gather_logprobs")
def test_logprobs_are_the_models_log_softmax_in_float64():
    """Of the raw logits: a row with a temperature and penalties gets the same numbers as a plain one."""
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(7)) * 4
    tokens = torch.tensor([5, 17, 40], dtype=torch.int32)
    rows = torch.tensor([0, 2])
    got = gather_logprobs(logits, tokens, rows, 5)
    want = logits.double().log_softmax(dim=-1)
    assert_close(got.chosen, want[[0, 2], tokens[[0, 2]].long()], 1e-6, "log-probability of the picked token")
    best = want[[0, 2]].topk(5, dim=-1)
    assert torch.equal(got.top_ids, best.indices), f"top-5 ids {got.top_ids.tolist()}, want {best.indices.tolist()}"
    assert_close(got.top_values, best.values, 1e-6, "top-5 log-probabilities")
    half = gather_logprobs(logits.bfloat16(), tokens, rows, 1)
    want16 = logits.bfloat16().double().log_softmax(dim=-1)
    assert_close(half.chosen, want16[[0, 2], tokens[[0, 2]].long()], 1e-6, "bf16 logits: computed in float32")


# --- the batch: rows without these settings are chapter 6's ------------------------------------------------------

def chapter6_sampler():
    """Chapter 6's Sampler, loaded from its own file, to compare with."""
    path = Path(__file__).resolve().parents[1] / "solutions/ch06_engine/minisgl/engine/sample.py"
    spec = importlib.util.spec_from_file_location("ch06_sample", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["ch06_sample"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.stubs("edit_logits", "apply_penalties", "min_p_filter")
def test_rows_without_chapter_24_settings_sample_as_chapter_6():
    """Rows 0-2: greedy and seeded sampling, nothing of chapter 24; rows 3-5 with penalties, min_p, logit_bias
    and min_tokens in the same batch. Rows 0-2 pick what chapter 6's sampler picks for them alone, at every step."""
    ch06 = chapter6_sampler()
    pool = torch.zeros(6, 64, dtype=torch.int32)
    g = torch.Generator().manual_seed(8)
    plain = [dict(), dict(temperature=0.8, seed=11), dict(temperature=1.3, top_k=20, top_p=0.9, seed=12)]
    extra = [dict(temperature=0.9, repetition_penalty=1.5, frequency_penalty=0.4, seed=13),
             dict(temperature=1.0, min_p=0.2, logit_bias={1: 5.0}, seed=14), dict(min_tokens=6, presence_penalty=1.0)]
    for step in range(20):
        logits = torch.randn(6, VOCAB, generator=g)
        reqs = [make_req(i, [1, 2, 3], [9] * step, pool, max_tokens=32, **kw) for i, kw in enumerate(plain + extra)]
        tokens = Sampler("cpu", seed=0).sample(logits, BatchSamplingArgs.from_reqs(reqs, "cpu", pool, (3,)))
        alone = ch06.Sampler("cpu", seed=0).sample(logits[:3], ch06.BatchSamplingArgs.from_reqs(reqs[:3], "cpu"))
        assert tokens[:3].tolist() == alone.tolist(), f"step {step}: rows 0-2 picked {tokens[:3].tolist()}, " \
                                                      f"chapter 6 picks {alone.tolist()}"
        args = BatchSamplingArgs.from_reqs(reqs, "cpu", pool, (3,))
        assert torch.equal(edit_logits(logits.clone(), args.edits)[:3], logits[:3]), f"step {step}: rows 0-2 edited"


def test_a_plain_batch_builds_chapter_6s_arguments():
    pool = torch.zeros(2, 8, dtype=torch.int32)
    reqs = [make_req(0, [1, 2], [], pool), make_req(1, [1, 2], [], pool, temperature=0.5)]
    args = BatchSamplingArgs.from_reqs(reqs, "cpu", pool, (3,))
    assert args.edits is None and args.min_p is None and args.logprob_rows is None, f"extras were built: {args}"
    assert BatchSamplingArgs.from_reqs(reqs[:1], "cpu", pool).temperatures is None, "greedy keeps the argmax path"


@pytest.mark.stubs("min_p_filter")
@pytest.mark.parametrize("temperature,min_p", [(1.0, 0.25), (0.5, 0.25), (2.0, 0.4)])
def test_sampling_frequencies_with_min_p(temperature, min_p):
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    tempered = probs ** (1 / temperature) / (probs ** (1 / temperature)).sum()
    want = torch.where(tempered >= min_p * tempered.max(), tempered, 0.0)
    want = (want / want.sum()).tolist()
    n = 6000
    logits = probs.float().log().repeat(n, 1)
    args = BatchSamplingArgs(torch.full((n,), temperature), torch.full((n,), -1), torch.ones(n),
                             min_p=torch.full((n,), min_p))
    tokens = Sampler("cpu", seed=2).sample(logits, args)
    freq = (torch.bincount(tokens.long(), minlength=4).double() / n).tolist()
    never = [t for t in range(4) if want[t] == 0.0 and freq[t] > 0]
    assert not never, f"tokens {never} are below min_p yet were sampled: {freq} vs {want}"
    # 6000 draws: a frequency's standard deviation is at most 0.0065, 0.03 is over 4.5 of them.
    worst = max(abs(f - w) for f, w in zip(freq, want))
    assert worst < 0.03, f"T={temperature}, min_p={min_p}: frequencies {freq} vs {want}"


# --- whole runs ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def llm():
    return LLM(model_path(NAME), max_running_reqs=8, max_seq_len=256, num_pages=1024)


def prompts() -> list[list[int]]:
    tok = tokenizer(NAME)
    return [tok.encode(t) for t in TEXTS]


def hf_generate(ids: list[int], n: int, name: str = NAME, **kwargs) -> list[int]:
    """HF greedy with its own logits processors (kwargs: repetition_penalty, min_new_tokens, ...), cached on disk."""
    settings = repr(sorted(kwargs.items()))  # repr: sequence_bias has tuple keys, which JSON cannot hold
    return hf_cached(name, ["generate", list(ids), n, settings], lambda: _hf_generate(ids, n, name, **kwargs))


def _hf_generate(ids: list[int], n: int, name: str = NAME, **kwargs) -> list[int]:
    model = hf_model(name)
    saved = model.generation_config.eos_token_id
    eos = kwargs.pop("eos_token_id", None)
    model.generation_config.eos_token_id = eos
    try:
        with torch.inference_mode():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 do_sample=False, max_new_tokens=n, eos_token_id=eos, pad_token_id=0,
                                 temperature=None, top_p=None, top_k=None, **kwargs)
    finally:
        model.generation_config.eos_token_id = saved
    return out[0, len(ids):].tolist()


def test_defaults_still_match_hf_greedy(llm):
    ps = prompts()
    outs = llm.generate(ps, SamplingParams(max_tokens=N, ignore_eos=True))
    for i, (p, o) in enumerate(zip(ps, outs)):
        assert o["token_ids"] == hf_greedy(NAME, p, N), f"prompt {i}: default sampling is no longer HF greedy"
    assert_clean(llm)


@pytest.mark.stubs("edit_logits", "apply_penalties")
@pytest.mark.parametrize("penalty", [0.5, 3.0])
def test_greedy_with_a_repetition_penalty_matches_hf_generate(llm, penalty):
    ps = prompts()
    outs = llm.generate(ps, SamplingParams(max_tokens=N, ignore_eos=True, repetition_penalty=penalty))
    changed = 0
    for i, (p, o) in enumerate(zip(ps, outs)):
        want = hf_generate(p, N, repetition_penalty=penalty)
        assert o["token_ids"] == want, f"prompt {i}, repetition_penalty {penalty}: {o['token_ids']} vs HF {want}"
        changed += want != hf_greedy(NAME, p, N)
    assert changed, f"repetition_penalty {penalty} changes no prompt's output: the test checks nothing"
    assert_clean(llm)


@pytest.mark.stubs("edit_logits", "apply_penalties")
@pytest.mark.parametrize("frequency,presence", [(1.5, 0.5), (-2.0, -1.0)])
def test_greedy_with_openai_penalties_matches_a_float64_loop(llm, frequency, presence):
    """No HF processor has OpenAI's penalties: the reference is HF's model, step by step, the formula in float64."""
    model = hf_model(NAME)
    ps = prompts()
    params = SamplingParams(max_tokens=N, ignore_eos=True, frequency_penalty=frequency, presence_penalty=presence)
    outs = llm.generate(ps, params)
    changed = 0
    for i, (p, o) in enumerate(zip(ps, outs)):
        seq, out = list(p), []
        for _ in range(N):
            with torch.inference_mode():
                last = model(torch.tensor([seq])).logits[0, -1]
            logits = last.double().clone()  # a normal tensor: inference tensors refuse in-place updates
            for token, count in collections.Counter(out).items():
                logits[token] -= frequency * count + presence
            out.append(int(logits.argmax()))
            seq.append(out[-1])
        assert o["token_ids"] == out, f"prompt {i}: {o['token_ids']} vs the float64 reference {out}"
        changed += out != hf_greedy(NAME, p, N)
    assert changed, "the penalties change no prompt's output: the test checks nothing"
    assert_clean(llm)


@pytest.mark.stubs("edit_logits")
def test_min_tokens_delays_an_eos_as_hf_does(llm):
    """A logit_bias on EOS makes it come at once; min_tokens holds it off (HF: sequence_bias, min_new_tokens)."""
    eos = hf_model(NAME).generation_config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    p = prompts()[0]
    for min_tokens in (0, 5):
        params = SamplingParams(max_tokens=N, min_tokens=min_tokens, logit_bias={eos: 30.0})
        got = llm.generate([p], params)[0]["token_ids"]
        want = hf_generate(p, N, eos_token_id=eos, sequence_bias={(eos,): 30.0}, min_new_tokens=min_tokens)
        assert got == want, f"min_tokens {min_tokens}: {got} vs HF {want}"
        assert len(got) == min_tokens + 1, f"min_tokens {min_tokens}: EOS should come right after, got {got}"
    assert_clean(llm)


@pytest.mark.stubs("gather_logprobs")
def test_the_engine_returns_the_logprobs_of_the_models_logits():
    eng = Engine(EngineConfig(model_path(NAME), max_running_reqs=4, max_seq_len=128, num_pages=512))
    batcher = ManualBatcher(eng)
    p = prompts()[1]
    reqs = [batcher.add(p, SamplingParams(max_tokens=4, logprobs=True, top_logprobs=3, temperature=0.7, seed=1)),
            batcher.add(p, SamplingParams(max_tokens=4))]
    batch = Batch(reqs, "prefill")
    batcher.prepare(batch)
    tokens = eng.forward_batch(batch)
    asked, lp = batch.logprobs
    assert asked == reqs[:1], "only the request that asked gets log-probabilities"
    want = hf_model(NAME)(torch.tensor([p])).logits[0, -1].double().log_softmax(-1).detach()
    assert_close(lp.chosen, want[tokens[:1].long()], 1e-4, "log-probability of the sampled token against HF")
    best = want.topk(3)
    assert lp.top_ids[0].tolist() == best.indices.tolist(), f"top-3 ids {lp.top_ids[0].tolist()} vs HF {best.indices}"
    assert_close(lp.top_values[0], best.values, 1e-4, "top-3 log-probabilities against HF")


# --- bad settings ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(presence_penalty=2.5), "presence_penalty must be in"),
    (dict(frequency_penalty=-2.01), "frequency_penalty must be in"),
    (dict(frequency_penalty=float("nan")), "frequency_penalty must be a finite number"),
    (dict(repetition_penalty=0.0), "repetition_penalty must be > 0"),
    (dict(min_p=1.5), "min_p must be in"),
    (dict(logit_bias={5: 101}), r"logit_bias\[5\] must be in"),
    (dict(logit_bias={-1: 1.0}), "logit_bias token id must be an integer"),
    (dict(logit_bias={"5": 1.0}), "logit_bias token id must be an integer"),
    (dict(logit_bias=[(5, 1.0)]), "logit_bias must be a dict"),
    (dict(min_tokens=-1), "min_tokens must be an integer"),
    (dict(min_tokens=20, max_tokens=16), r"min_tokens \(20\) must be <= max_tokens \(16\)"),
    (dict(logprobs=1), "logprobs must be True or False"),
    (dict(logprobs=True, top_logprobs=21), "top_logprobs must be at most 20"),
    (dict(top_logprobs=2), "top_logprobs needs logprobs=True"),
    (dict(n=0), "n must be an integer >= 1"),
])
def test_bad_settings_are_a_value_error_naming_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


def test_a_logit_bias_outside_the_vocabulary_is_refused_before_anything_runs(llm):
    vocab = llm.scheduler.engine.model_config.vocab_size
    with pytest.raises(ValueError, match="logit_bias token id .* outside the vocabulary"):
        llm.generate([prompts()[0]], SamplingParams(max_tokens=4, logit_bias={vocab: 1.0}))
    assert_clean(llm)


# --- n > 1 ------------------------------------------------------------------------------------------------------

def test_n_samples_use_seeds_seed_plus_k_and_share_the_prompt(llm):
    """n = 3 with seed 5: sample k is the request with seed 5 + k alone, and after the prompt ran once, every
    sample's prefill finds all of the prompt but its last token in the radix cache."""
    p = prompts()[2]
    base = dict(max_tokens=N, ignore_eos=True, temperature=1.0, top_p=0.95)
    extends = []
    llm.scheduler.on_batch = lambda b: extends.extend((r.cached_len, r.extend_len) for r in b.prefill_reqs)
    try:
        out = llm.generate([p], SamplingParams(n=3, seed=5, **base))[0]
    finally:
        llm.scheduler.on_batch = None
    assert len(out["samples"]) == 3 and out["token_ids"] == out["samples"][0]["token_ids"], f"{out}"
    assert extends[-3:] == [(len(p) - 1, 1)] * 3, f"(cached, computed) of the 3 samples' prefills: {extends[-3:]}"
    for k, sample in enumerate(out["samples"]):
        alone = llm.generate([p], SamplingParams(seed=5 + k, **base))[0]["token_ids"]
        assert sample["token_ids"] == alone, f"sample {k}: {sample['token_ids']} vs seed {5 + k} alone {alone}"
    assert len({tuple(s["token_ids"]) for s in out["samples"]}) > 1, "three samples at temperature 1 all equal"
    assert_clean(llm)


def test_the_first_tokens_of_n_samples_follow_the_models_softmax(llm):
    """n = 1200 samples of one token: their frequencies against HF's float64 softmax at the prompt's end."""
    p = prompts()[0]
    n = 1200
    out = llm.generate([p], SamplingParams(n=n, seed=0, max_tokens=1, ignore_eos=True, temperature=1.0))[0]
    with torch.inference_mode():
        probs = hf_model(NAME)(torch.tensor([p])).logits[0, -1].double().softmax(-1)
    firsts = collections.Counter(s["token_ids"][0] for s in out["samples"])
    # 1200 draws: a frequency's standard deviation is at most 0.0145, 0.065 is over 4.5 of them.
    worst = max(range(len(probs)), key=lambda t: abs(firsts[t] / n - float(probs[t])))
    assert abs(firsts[worst] / n - float(probs[worst])) < 0.065, \
        f"token {worst}: frequency {firsts[worst] / n:.3f}, softmax {float(probs[worst]):.3f}"
    assert_clean(llm)


# --- log-probabilities through the scheduler and LLM ------------------------------------------------------------

def hf_logprobs(ids: list[int], out: list[int]) -> torch.Tensor:
    """[len(out), vocab] float64 log_softmax of HF's logits at each output position (the sequence fed whole)."""
    with torch.inference_mode():
        logits = hf_model(NAME)(torch.tensor([ids + out])).logits[0, len(ids) - 1: len(ids) + len(out) - 1]
    return logits.double().log_softmax(-1)


def check_logprobs(result: dict, ids: list[int], k: int, what: str) -> None:
    out = result["token_ids"]
    want = hf_logprobs(ids, out)
    assert len(result["logprobs"]) == len(out), f"{what}: {len(result['logprobs'])} logprobs for {len(out)} tokens"
    chosen = want[torch.arange(len(out)), torch.tensor(out)]
    assert_close(torch.tensor(result["logprobs"]), chosen, 1e-4, f"{what}: logprobs of the output tokens",
                 row="token")
    for step, top in enumerate(result["top_logprobs"]):
        assert len(top) == k, f"{what}, token {step}: {len(top)} alternatives, asked for {k}"
        got_ids = [t for t, _ in top]
        values = torch.tensor([v for _, v in top])
        assert values.tolist() == sorted(values.tolist(), reverse=True), f"{what}, token {step}: not best first"
        assert_close(values, want[step, got_ids], 1e-4, f"{what}, token {step}: top_logprobs values vs HF")
        gap = float(want[step].topk(k + 1).values[k - 1] - want[step].topk(k + 1).values[k])
        if gap > 1e-3:  # no near-tie at the k-th place: the same ids as HF's top k
            assert set(got_ids) == set(want[step].topk(k).indices.tolist()), \
                f"{what}, token {step}: top ids {got_ids} vs HF {want[step].topk(k).indices.tolist()}"


@pytest.mark.stubs("gather_logprobs")
@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
def test_generate_returns_hfs_logprobs_for_every_output_token(overlap):
    """Greedy and sampled requests with logprobs beside requests without, through the scheduler (overlap on or off):
    every output token's log-probability and top 3 are HF's float64 log_softmax at that position."""
    llm = LLM(model_path(NAME), max_running_reqs=8, max_seq_len=256, num_pages=1024, overlap=overlap)
    ps = prompts()
    params = [SamplingParams(max_tokens=N, ignore_eos=True, logprobs=True, top_logprobs=3),
              SamplingParams(max_tokens=N, ignore_eos=True),
              SamplingParams(max_tokens=N, ignore_eos=True, logprobs=True, top_logprobs=3, temperature=0.8, seed=2),
              SamplingParams(max_tokens=N, ignore_eos=True, logprobs=True, top_logprobs=1, repetition_penalty=1.3)]
    outs = llm.generate(ps[:4], params)
    assert "logprobs" not in outs[1], "a request that did not ask gets no logprobs"
    for i in (0, 2, 3):
        check_logprobs(outs[i], ps[i], params[i].top_logprobs, f"request {i}")
    assert outs[0]["token_ids"] == hf_greedy(NAME, ps[0], N), "logprobs change nothing in the output"
    assert not llm.scheduler.logprobs.entries, f"entries left behind: {list(llm.scheduler.logprobs.entries)}"
    assert_clean(llm)


@pytest.mark.stubs("gather_logprobs")
def test_logprobs_survive_a_retraction():
    """A tight pool with optimistic admission retracts requests and recomputes them: each keeps one entry per
    output token, the same as in a pool that never retracts."""
    from minisgl.scheduler.retract import NewTokenRatio

    ps = prompts()
    params = SamplingParams(max_tokens=24, ignore_eos=True, logprobs=True, top_logprobs=2)
    runs = {}
    for pool, admission in ((8 * 64, "conservative"), (110, "optimistic")):
        llm = LLM(model_path(NAME), max_running_reqs=8, max_seq_len=64, page_size=1, num_pages=pool, overlap=False,
                  admission=admission, new_token_ratio=NewTokenRatio(0.1, 0.1, 1))
        runs[admission] = (llm.generate(ps, params), llm.scheduler.admission.num_retractions)
        assert_clean(llm)
    (calm, zero), (tight, retractions) = runs["conservative"], runs["optimistic"]
    assert zero == 0 and retractions > 0, f"retractions: {zero} in the large pool, {retractions} in the tight one"
    for i, (a, b) in enumerate(zip(calm, tight)):
        assert a["token_ids"] == b["token_ids"], f"request {i}: the output changed with retraction"
        assert len(b["logprobs"]) == len(b["token_ids"]), \
            f"request {i}: {len(b['logprobs'])} logprobs for {len(b['token_ids'])} tokens after a retraction"
        assert_close(torch.tensor(b["logprobs"]), torch.tensor(a["logprobs"]), 1e-4, f"request {i}: logprobs",
                     row="token")


# --- the text side: min_tokens against stops, token texts --------------------------------------------------------

def test_min_tokens_holds_off_stop_tokens_and_stop_strings():
    """vLLM's rule: neither a stop token id nor a stop string ends the stream before min_tokens tokens."""
    from minisgl.tokenizer.detokenize import IncrementalDetokenizer

    tok = tokenizer("smollm2")
    ids = tok.encode(" one. two. three. four.")
    dot = tok.encode(".")[0]
    assert dot in ids
    first_dot = ids.index(dot)
    for min_tokens in (0, first_dot + 2):
        d = IncrementalDetokenizer(tok, stop_token_ids=[dot], min_tokens=min_tokens)
        text = "".join(d.step(t) for t in ids if not d.finished) + d.finish()
        fed = ids[: next(i for i, t in enumerate(ids) if t == dot and i >= min_tokens)]
        assert text == tok.decode(fed), f"min_tokens {min_tokens}, stop token '.': {text!r}"
        d = IncrementalDetokenizer(tok, stop=["."], min_tokens=min_tokens)
        text = "".join(d.step(t) for t in ids if not d.finished) + d.finish()
        want = " one" if min_tokens == 0 else " one. two"
        assert text == want and d.matched_stop == ".", f"min_tokens {min_tokens}, stop string '.': {text!r}"


BOUNDARY_QUESTION = "Write one sentence about the ocean."  # SmolLM2's greedy answer has commas at tokens 5 and 7


@pytest.mark.parametrize("stop", ["stop_token_ids", "stop string"])
def test_a_stop_exactly_at_min_tokens_ends_the_text_and_one_token_earlier_does_not(stop):
    """The tokenizer process (TokenizerWorker, in-process) gets the request, then the tokens the scheduler sends:
    SmolLM2's unconstrained greedy answer (HF), which min_tokens and stops do not change (they only end the text).
    The stop is its first ',' token, at output position k. min_tokens = k: k tokens came before it, the stop
    counts and the text ends there. min_tokens = k + 1: the ',' comes one token too early, is text like any other,
    and the next ',' ends the text."""
    from minisgl.message import AbortBackendMsg, DetokenizeMsg, TokenizeMsg
    from minisgl.tokenizer.server import TokenizerWorker

    tok = tokenizer(SERVER_MODEL)
    messages = [{"role": "user", "content": BOUNDARY_QUESTION}]
    out = hf_greedy(SERVER_MODEL, chat_ids(messages), 48, stop_at_eos=True)
    comma = tok.encode(",")
    assert len(comma) == 1, "the fixture: ',' is one token"
    at = [i for i, t in enumerate(out) if t == comma[0]]
    text = tok.decode(out, skip_special_tokens=True)
    assert len(at) >= 2 and text.count(",") == len(at), \
        f"the fixture: the answer needs two ',' tokens and no other comma: {at}, {text!r}"
    for min_tokens in (at[0], at[0] + 1):
        end = next(i for i in at if i >= min_tokens)  # the first ',' with min_tokens tokens before it
        worker = TokenizerWorker(tok, max_seq_len=256)
        params = SamplingParams(max_tokens=48, min_tokens=min_tokens)
        stops = dict(stop_token_ids=comma) if stop == "stop_token_ids" else dict(stop=[","])
        worker.handle([TokenizeMsg(7, messages, params, **stops)])
        worker.take_outputs()
        for i, token in enumerate(out):  # the scheduler runs on until it hears of the abort: it sends them all
            last = i == len(out) - 1
            worker.handle([DetokenizeMsg.one(7, token, "stop" if last else None)])
        to_backend, replies = worker.take_outputs()
        got = "".join(r.incremental_output for r in replies)
        want = tok.decode(out[:end])
        where = f"{stop} ',' at output tokens {at}, min_tokens {min_tokens}"
        assert got == want, (f"{where}: the text must end before the ',' at token {end}, got {got!r}, want {want!r}"
                             + (" (one token early: min_tokens tokens must come before the stop)"
                                if len(got) < len(want) else ""))
        final = replies[-1]
        assert final.finished and final.finish_reason == "stop", f"{where}: the stream ends on the stop: {final}"
        assert final.completion_tokens == end + 1, \
            f"{where}: {end + 1} tokens generated up to the stop, usage says {final.completion_tokens}"
        assert [type(m) for m in to_backend] == [AbortBackendMsg], \
            f"{where}: the scheduler is told to stop the request once, got {to_backend}"


@pytest.mark.stubs("edit_logits")
def test_an_eos_exactly_at_min_tokens_ends_the_answer_and_one_token_earlier_does_not():
    """SmolLM2's unconstrained greedy answer ends with EOS at output position e. min_tokens = e: e tokens came
    before it, the answer is unchanged. min_tokens = e + 1: the EOS is masked one token too early, and the answer is
    HF generate's with min_new_tokens = e + 1."""
    eos = hf_model(SERVER_MODEL).generation_config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    ids = chat_ids([{"role": "user", "content": CHAT[0]}])
    free = hf_greedy(SERVER_MODEL, ids, N, stop_at_eos=True)
    assert free[-1] == eos and len(free) < N, f"the fixture: the answer ends with EOS before {N} tokens: {free}"
    e = len(free) - 1
    llm = LLM(model_path(SERVER_MODEL), max_running_reqs=2, max_seq_len=128, num_pages=256)
    for min_tokens in (e, e + 1):
        got = llm.generate([ids], SamplingParams(max_tokens=N, min_tokens=min_tokens))[0]["token_ids"]
        want = free if min_tokens == e else hf_generate(ids, N, name=SERVER_MODEL, eos_token_id=eos,
                                                         min_new_tokens=min_tokens)
        assert got == want, f"EOS at output token {e}, min_tokens {min_tokens}: {got} vs HF {want}"
    assert want != free and want[e] != eos, "with min_tokens e + 1 the EOS at position e is masked"
    assert_clean(llm)


def test_the_tokenizer_process_sends_token_texts_and_keeps_them_across_a_stream_interval():
    from minisgl.message import DetokenizeMsg
    from minisgl.tokenizer.server import TokenizerWorker

    tok = tokenizer("smollm2")
    ids = tok.encode(" Paris is the capital")
    worker = TokenizerWorker(tok, max_seq_len=64)
    worker.open_stream(1, 3, stream_interval=2)
    for i, t in enumerate(ids):
        msg = DetokenizeMsg.one(1, t, "length" if i == len(ids) - 1 else None)
        msg.logprob_rows, msg.logprobs, msg.top_ids, msg.top_logprobs = [0], [-0.5 * i], [[t, 0]], [[-0.5 * i, -9.0]]
        worker.handle([msg])
    _, replies = worker.take_outputs()
    entries = [e for r in replies for e in r.logprobs]
    assert [e.token for e in entries] == [tok.decode([t]) for t in ids], f"one text per token: {entries}"
    assert "".join(e.token for e in entries) == "".join(r.incremental_output for r in replies)
    assert [e.logprob for e in entries] == [-0.5 * i for i in range(len(ids))]
    assert all(e.top_tokens == [e.token, tok.decode([0], skip_special_tokens=False)] for e in entries)
    assert len(replies) < len(ids), "a stream interval of 2 holds replies back, and their logprobs with them"


# --- the server's shapes ------------------------------------------------------------------------------------------

def entry(token: str, logprob: float):
    from minisgl.message.frontend import TokenLogprob

    return TokenLogprob(token, logprob, [token, "x"], [logprob, logprob - 1])


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_a_whole_answer_has_n_choices_and_openais_logprobs(chat):
    from minisgl.server.serving_chat import OpenAIServingChat
    from minisgl.server.serving_completions import OpenAIServingCompletion

    shape = (OpenAIServingChat(None, "m", ChatCompletionRequest(messages=[{"role": "user", "content": "q"}], n=2))
             if chat else OpenAIServingCompletion(None, "m", CompletionRequest(prompt="q", n=2)))
    last = [UserReply(1, "", True, "length", 5, 2), UserReply(2, "", True, "stop", 5, 3)]
    body = shape.full(["ab", "c"], last, [[entry("a", -1.0), entry("b", -2.0)], None])
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert [c["finish_reason"] for c in body["choices"]] == ["length", "stop"]
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}, \
        "usage counts the prompt once and the tokens of every choice"
    lp, none = body["choices"][0]["logprobs"], body["choices"][1]["logprobs"]
    assert none is None, "a choice without logprobs has null"
    if chat:
        assert lp["content"] == [
            {"token": "a", "logprob": -1.0, "bytes": [97],
             "top_logprobs": [{"token": "a", "logprob": -1.0, "bytes": [97]},
                              {"token": "x", "logprob": -2.0, "bytes": [120]}]},
            {"token": "b", "logprob": -2.0, "bytes": [98],
             "top_logprobs": [{"token": "b", "logprob": -2.0, "bytes": [98]},
                              {"token": "x", "logprob": -3.0, "bytes": [120]}]}], lp
    else:
        assert lp == {"tokens": ["a", "b"], "token_logprobs": [-1.0, -2.0], "text_offset": [0, 1],
                      "top_logprobs": [{"a": -1.0, "x": -2.0}, {"b": -2.0, "x": -3.0}]}, lp


def test_a_stream_of_two_choices_names_each_and_ends_after_both():
    from minisgl.server.serving_chat import OpenAIServingChat

    class Frontend:
        def __init__(self):
            self.finished, self.aborted = [], []

        def finish(self, uid):
            self.finished.append(uid)

        def abort(self, uid):
            self.aborted.append(uid)

    class Request:
        async def is_disconnected(self):
            return False

    replies = [UserReply(7, "a", False, None, 4, 1), UserReply(8, "x", False, None, 4, 1),
               UserReply(7, "b", True, "length", 4, 2), UserReply(8, "y", False, None, 4, 2),
               UserReply(8, "z", True, "stop", 4, 3)]
    req = ChatCompletionRequest(messages=[{"role": "user", "content": "q"}], n=2, stream=True,
                                stream_options={"include_usage": True})
    frontend, queue = Frontend(), asyncio.Queue()

    async def collect():
        for r in replies[1:]:
            queue.put_nowait(r)
        shape = OpenAIServingChat(frontend, "m", req)
        return [e async for e in shape.events([7, 8], queue, replies[0], Request())]

    raw = "".join(asyncio.run(collect()))
    chunks = [e[6:] for e in raw.strip().split("\n\n")]
    assert chunks[-1] == "[DONE]", "the stream ends with [DONE]"
    data = [json.loads(c) for c in chunks[:-1]]
    usage = data[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5, f"one usage chunk at the end: {usage}"
    text = {0: "", 1: ""}
    reasons = {}
    for c in data[:-1]:
        (choice,) = c["choices"]
        text[choice["index"]] += choice["delta"].get("content", "")
        if choice["finish_reason"]:
            reasons[choice["index"]] = choice["finish_reason"]
    assert text == {0: "ab", 1: "xyz"} and reasons == {0: "length", 1: "stop"}, f"{text} {reasons}"
    roles = [c["choices"][0]["index"] for c in data if c["choices"] and c["choices"][0]["delta"].get("role")]
    assert roles == [0, 1], f"each choice's first chunk names the role: {roles}"
    assert frontend.finished == [7, 8] and not frontend.aborted


@pytest.mark.parametrize("fields, param", [
    ({"logit_bias": {"x": 1.0}}, "logit_bias"), ({"logit_bias": {"5": 101.0}}, "logit_bias[5]"),
    ({"logprobs": 6}, "logprobs"), ({"n": 0}, "n"), ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"repetition_penalty": 0.0}, "repetition_penalty"), ({"min_p": 1.5}, "min_p"),
    ({"min_tokens": 20, "max_tokens": 16}, "min_tokens"), ({"best_of": 2}, "best_of"),
], ids=lambda v: json.dumps(v) if isinstance(v, dict) else v)
def test_bad_sampling_fields_are_a_400_naming_them(fields, param):
    from minisgl.server.errors import APIError
    from minisgl.server.protocol import CompletionRequest, to_tokenize_msg

    with pytest.raises(APIError) as refused:
        to_tokenize_msg(0, CompletionRequest(**({"prompt": "hi"} | fields)))
    assert (refused.value.status, refused.value.param) == (400, param), \
        f"{fields}: got {refused.value.status} naming {refused.value.param!r} ({refused.value.message})"


def test_openai_sampling_fields_become_sampling_params():
    from minisgl.server.protocol import to_tokenize_msg

    chat = ChatCompletionRequest(messages=[{"role": "user", "content": "q"}], n=3, logprobs=True, top_logprobs=4,
                                 presence_penalty=0.5, frequency_penalty=-0.5, logit_bias={"12": -100},
                                 repetition_penalty=1.1, min_p=0.05, min_tokens=2, seed=9)
    p = to_tokenize_msg(0, chat).sampling_params
    assert (p.n, p.logprobs, p.top_logprobs, p.presence_penalty, p.frequency_penalty, p.logit_bias,
            p.repetition_penalty, p.min_p, p.min_tokens) == (3, True, 4, 0.5, -0.5, {12: -100.0}, 1.1, 0.05, 2), p
    with pytest.raises(Exception, match="top_logprobs"):
        to_tokenize_msg(0, ChatCompletionRequest(messages=[{"role": "user", "content": "q"}], top_logprobs=2))
    legacy = to_tokenize_msg(0, CompletionRequest(prompt="hi", logprobs=0)).sampling_params
    assert (legacy.logprobs, legacy.top_logprobs) == (True, 0), "completions' logprobs=0: the chosen tokens only"
    assert not to_tokenize_msg(0, CompletionRequest(prompt="hi")).sampling_params.logprobs


# --- the server, through the official openai client --------------------------------------------------------------

SERVER_MODEL = "smollm2"


@pytest.fixture(scope="module")
def server():
    from minisgl.server.local import LocalServer

    flags = ("--max-running-reqs", "8", "--max-seq-len", "256", "--cpu-kv-cache-mb", "32")
    with LocalServer(model_path(SERVER_MODEL), *flags, echo=False) as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def chat_ids(messages: list[dict]) -> list[int]:
    tok = tokenizer(SERVER_MODEL)
    return list(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


@pytest.mark.stubs("gather_logprobs")
def test_the_openai_client_reads_n_choices_and_logprobs_of_a_chat(client):
    """n = 2 at temperature 0: both choices are HF greedy; each token's logprob and top 2 are HF's."""
    gather_logprobs(torch.zeros(1, 4), torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.long), 2)
    tok = tokenizer(SERVER_MODEL)  # the line above: on the skeleton, the stub fails here, not in the server
    messages = [{"role": "user", "content": CHAT[0]}]
    ids = chat_ids(messages)
    want = hf_greedy(SERVER_MODEL, ids, 12, stop_at_eos=True)
    r = client.chat.completions.create(model=SERVER_MODEL, messages=messages, max_tokens=12, temperature=0, n=2,
                                       logprobs=True, top_logprobs=2)
    assert [c.index for c in r.choices] == [0, 1], f"choices {r.choices}"
    assert r.usage.completion_tokens == 2 * len(want) and r.usage.prompt_tokens == len(ids), f"usage {r.usage}"
    with torch.inference_mode():
        logits = hf_model(SERVER_MODEL)(torch.tensor([ids + want])).logits[0, len(ids) - 1: len(ids) + len(want) - 1]
    ref = logits.double().log_softmax(-1)
    for c in r.choices:
        assert c.message.content == tok.decode(want, skip_special_tokens=True), f"choice {c.index}: {c.message}"
        content = c.logprobs.content
        assert [e.token for e in content] == [tok.decode([t], skip_special_tokens=False) for t in want], \
            f"choice {c.index}: token texts {[e.token for e in content]}"
        got = torch.tensor([e.logprob for e in content])
        assert_close(got, ref[torch.arange(len(want)), torch.tensor(want)], 1e-4,
                     f"choice {c.index}: logprobs against HF", row="token")
        assert all(len(e.top_logprobs) == 2 and e.top_logprobs[0].token == e.token for e in content), \
            f"choice {c.index}: at temperature 0 the best alternative is the token itself"


@pytest.mark.stubs("edit_logits", "apply_penalties")
def test_seeded_choices_of_a_stream_are_the_requests_with_seeds_seed_plus_k(client):
    """n = 3, seed 4, streamed with legacy logprobs: choice k is the answer to the same request with n = 1 and seed
    4 + k; the choices stream interleaved, each chunk naming its index."""
    one = torch.ones(1)  # on the skeleton, the stub fails here, in this process, not in the server's
    apply_penalties(torch.zeros(1, 4), torch.zeros(1, 4), torch.zeros(1, 4, dtype=torch.bool), one, one, one)
    kw = dict(model=SERVER_MODEL, prompt=TEXTS[1], max_tokens=10, temperature=1.0, presence_penalty=1.0)
    texts, logprobs = {}, {}
    for chunk in client.completions.create(n=3, seed=4, stream=True, logprobs=1, **kw):
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            if c.logprobs is not None:
                logprobs.setdefault(c.index, []).extend(c.logprobs.tokens)
    assert sorted(texts) == [0, 1, 2], f"choices streamed: {sorted(texts)}"
    for k in range(3):
        alone = client.completions.create(n=1, seed=4 + k, **kw).choices[0].text
        assert texts[k] == alone, f"choice {k}: {texts[k]!r}, seed {4 + k} alone: {alone!r}"
        assert "".join(logprobs[k]) == texts[k], f"choice {k}: the logprobs' tokens spell its text"
    assert len(set(texts.values())) > 1, "three samples at temperature 1 all equal"


def test_bad_sampling_fields_get_a_400_and_the_server_goes_on(server, client):
    for body, param in [({"logit_bias": {"abc": 1}}, "logit_bias"), ({"logprobs": 7}, "logprobs"),
                        ({"repetition_penalty": -1}, "repetition_penalty"),
                        ({"logit_bias": {str(10**6): 1}}, "logit_bias")]:
        r = httpx.post(server.url + "/v1/completions", timeout=120,
                       json={"model": SERVER_MODEL, "prompt": "hi", "max_tokens": 2} | body)
        error = r.json().get("error", {})
        assert r.status_code == 400 and error.get("param") == param, f"{body}: {r.status_code} {r.text}"
    r = client.completions.create(model=SERVER_MODEL, prompt="hi", max_tokens=2, temperature=0)
    assert r.choices[0].text, "the server answers after the bad requests"


# --- the GPU ------------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.stubs("apply_penalties", "min_p_filter", "gather_logprobs")
@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
def test_the_sampling_api_on_the_gpu_with_cuda_graphs(overlap):
    """On CUDA in float32, with CUDA graphs up to batch 8 and overlap on or off, four rows of one batch: a plain
    greedy one equals HF greedy, a penalised one HF generate with its processor, a logprobs one HF's float64
    log_softmax, and a seeded min_p sample draws the same tokens when run again alone."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    llm = LLM(model_path(NAME), device="cuda", dtype="float32", max_running_reqs=8, max_seq_len=256, num_pages=1024,
              overlap=overlap, cuda_graph_max_bs=8)
    ps = prompts()
    params = [SamplingParams(max_tokens=N, ignore_eos=True),
              SamplingParams(max_tokens=N, ignore_eos=True, repetition_penalty=1.3),
              SamplingParams(max_tokens=N, ignore_eos=True, logprobs=True, top_logprobs=3),
              SamplingParams(max_tokens=N, ignore_eos=True, temperature=0.9, min_p=0.1, seed=3)]
    outs = llm.generate(ps[:4], params)
    assert outs[0]["token_ids"] == hf_greedy(NAME, ps[0], N), "a plain row on the GPU differs from HF greedy"
    want = hf_generate(ps[1], N, repetition_penalty=1.3)
    assert outs[1]["token_ids"] == want, f"repetition penalty on the GPU: {outs[1]['token_ids']} vs HF {want}"
    check_logprobs(outs[2], ps[2], 3, "GPU request 2")
    again = llm.generate(ps[3:4], params[3:])[0]["token_ids"]
    assert again == outs[3]["token_ids"], f"a seeded min_p sample changed when run alone: {again} vs {outs[3]}"
    assert_clean(llm)
