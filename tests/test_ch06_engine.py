"""Chapter 6: the Engine runs hand-filled batches through the paged KV pool and matches HF greedy."""

from __future__ import annotations

import pytest
import torch

from helpers import MODEL_NAMES, assert_clean, hf_greedy, model_path, prompt_ids
from minisgl.core import SamplingParams
from minisgl.engine import Engine, EngineConfig
from minisgl.teaching.manual import ManualBatcher
from minisgl.engine.sample import BatchSamplingArgs, Sampler, top_k_top_p_filter

ENGINE_STUBS = ("Engine.forward_batch", "Sampler.sample")


@pytest.fixture(scope="module", params=MODEL_NAMES)
def engine(request):
    # An explicit pool size: sizing from memory has its own test.
    config = EngineConfig(model_path(request.param), max_running_reqs=8, max_seq_len=256, num_pages=2048)
    return request.param, Engine(config)



@pytest.mark.stubs(*ENGINE_STUBS)
def test_batch_with_a_cached_prefix_matches_hf(engine):
    """Three fresh requests prefill together, then a fourth reuses the first one's prompt from the cache."""
    name, eng = engine
    n = 12
    params = SamplingParams(max_tokens=n, ignore_eos=True)
    prompts = prompt_ids(name, 3)
    batcher = ManualBatcher(eng)
    reqs = [batcher.add(p, params) for p in prompts]
    batcher.run(reqs)
    follow_up = prompts[0] + prompts[1][:4]
    reader = batcher.add(follow_up, params, prefix_of=reqs[0], prefix_len=len(prompts[0]))
    assert reader.extend_len == 4, "only the new suffix is computed"
    batcher.run([reader])
    for req, prompt in zip(reqs + [reader], prompts + [follow_up]):
        assert req.output_ids == hf_greedy(name, prompt, n), f"{name}: request {req.uid} differs from HF"
    with pytest.raises(ValueError, match="lends its prefix"):
        batcher.release(reqs[0])
    for req in [reader] + reqs:
        batcher.release(req)
    assert_clean(batcher)


@pytest.mark.stubs(*ENGINE_STUBS)
def test_batching_does_not_change_results(engine):
    name, eng = engine
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    prompts = prompt_ids(name, 3)
    batcher = ManualBatcher(eng)
    together = batcher.generate(prompts, params)
    alone = [batcher.generate([p], params)[0] for p in prompts]
    assert together == alone, f"{name}: tokens in a batch of 3 {together} vs one at a time {alone}"
    assert_clean(batcher)


@pytest.mark.stubs(*ENGINE_STUBS)
def test_eos_stops_a_request_like_hf():
    name = "smollm2"
    eng = Engine(EngineConfig(model_path(name), max_running_reqs=4, max_seq_len=512, num_pages=1024))
    batcher = ManualBatcher(eng)
    prompt = prompt_ids(name, 1)[0]
    out = batcher.generate([prompt], SamplingParams(max_tokens=64))[0]
    ref = hf_greedy(name, prompt, 64, stop_at_eos=True)
    assert out == ref, f"engine {out} vs HF {ref}"
    assert out[-1] in eng.model_config.eos_token_ids, "the fixture prompt should finish within 64 tokens"
    assert_clean(batcher)


@pytest.mark.stubs("Engine._num_kv_pages")
def test_kv_pool_is_sized_from_memory():
    path = model_path("tiny-qwen3")
    eng = Engine(EngineConfig(path, max_running_reqs=2, max_seq_len=64, cpu_kv_cache_mb=1))
    per_token = eng.kv_bytes_per_token
    assert eng.num_pages == min(2**20 // per_token, 2 * 64), f"{eng.num_pages} pages from 1 MiB at {per_token} B/token"
    big = Engine(EngineConfig(path, max_running_reqs=2, max_seq_len=64, cpu_kv_cache_mb=64))
    assert big.num_pages == 128, "never more pages than the page table can address"
    paged = Engine(EngineConfig(path, max_running_reqs=2, max_seq_len=64, page_size=4, cpu_kv_cache_mb=64))
    assert (paged.num_pages, paged.kv_cache.num_slots) == (32, 128), "pages of 4 slots: 32 pages, 128 slots"
    with pytest.raises(ValueError, match="no room"):
        Engine(EngineConfig(path, cpu_kv_cache_mb=0))


@pytest.mark.stubs("Sampler.sample")
def test_greedy_and_top_k_1_take_the_argmax():
    logits = torch.tensor([[0.1, 3.0, 0.2], [5.0, 1.0, 4.9]])
    sampler = Sampler("cpu", seed=0)
    greedy = BatchSamplingArgs(temperatures=None)
    tokens = sampler.sample(logits, greedy)
    assert tokens.dtype == torch.int32 and tokens.tolist() == [1, 0], f"greedy picked {tokens} (want int32 [1, 0])"
    args = BatchSamplingArgs(torch.tensor([1.0, 1.0]), torch.tensor([1, 1]), torch.tensor([1.0, 1.0]))
    for _ in range(20):
        tokens = sampler.sample(logits, args).tolist()
        assert tokens == [1, 0], f"top-k 1 sampled {tokens}, not the argmax [1, 0]"


def kept(logits: torch.Tensor, top_k: list[int], top_p: list[float]) -> list[list[bool]]:
    return torch.isfinite(top_k_top_p_filter(logits, torch.tensor(top_k), torch.tensor(top_p))).tolist()


@pytest.mark.stubs("top_k_top_p_filter")
def test_top_k_top_p_filter():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.3, 0.5]]))
    assert kept(logits, [2, -1], [1.0, 0.6]) == [[True, True, False, False], [False, False, True, True]], \
        "row 0: top-k 2 keeps the best two; row 1: top-p 0.6 needs 0.5 + 0.3"
    counts = torch.tensor(kept(logits, [-1, -1], [1e-6, 1e-6])).sum(-1).tolist()
    assert counts == [1, 1], f"the best token always survives a tiny top_p: kept {counts}"
    both = kept(logits, [3, 2], [0.6, 0.9])
    assert both == [[True, True, False, False], [False, False, True, True]], f"the stricter filter wins: {both}"


# The nucleus (Holtzman et al.; Hugging Face's TopPLogitsWarper): the fewest best tokens whose probabilities sum
# to at least top_p. The token whose running sum crosses top_p is kept; every later one is dropped.
@pytest.mark.stubs("top_k_top_p_filter")
@pytest.mark.parametrize("top_p,count", [(0.499, 1), (0.501, 2), (0.799, 2), (0.801, 3), (0.949, 3), (0.951, 4),
                                         (1.0, 4)])
def test_top_p_keeps_the_token_that_crosses_it(top_p, count):
    logits = torch.log(torch.tensor([[0.15, 0.5, 0.05, 0.3]]))  # running sums by rank: 0.5, 0.8, 0.95, 1
    want = [[rank < count for rank in (2, 0, 3, 1)]]
    assert kept(logits, [-1], [top_p]) == want, f"top_p={top_p} must keep the best {count} tokens"


@pytest.mark.stubs("top_k_top_p_filter")
@pytest.mark.parametrize("top_p,count", [(0.25, 1), (0.5, 2), (0.75, 3), (1.0, 4)])
def test_top_p_exactly_at_a_running_sum(top_p, count):
    """Four equal logits: every probability is exactly 1/4, so the running sums 0.25, 0.5, 0.75 are exact. When one
    equals top_p, its token completes the nucleus and the next is dropped (keeping it too is one token too many)."""
    logits = torch.zeros(1, 4)
    got = sum(kept(logits, [-1], [top_p])[0])
    assert got == count, f"top_p={top_p} over four tokens of 1/4: kept {got}, the nucleus has {count}"


# Both filters read the same (tempered) distribution, as SGLang's samplers do (flashinfer's "joint" order, and its
# torch fallback's one cumulative sum). Hugging Face applies its warpers one after another instead: its top-p
# sums the softmax of what top-k left. The two differ only where both filters bind, as here: top-k 2 leaves 0.5
# and 0.3; the mass before 0.3 is 0.5 < 0.55 of the whole distribution (kept), but 0.625 >= 0.55 of the
# renormalised pair (HF drops it).
@pytest.mark.stubs("top_k_top_p_filter")
def test_top_k_and_top_p_read_the_same_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    got = kept(logits, [2], [0.55])
    assert got == [[True, True, False, False]], (
        f"top_k=2, top_p=0.55 over 0.5/0.3/0.15/0.05 kept {got[0]}: top-p must measure the mass before a token in "
        "the distribution top-k was given (0.5 < 0.55: two tokens), not in the renormalised top-k (HF's order: one)")


def nucleus_float64(probs: list[float], temperature: float, top_k: int, top_p: float) -> list[float]:
    """The distribution to sample from, by the definition: temperature first, then top-k and top-p both on the
    tempered probabilities (SGLang's order, see above), then renormalise."""
    tempered = torch.tensor(probs, dtype=torch.float64).log().div(temperature).softmax(-1)
    order = tempered.argsort(descending=True).tolist()
    keep, total = set(), 0.0
    for rank, token in enumerate(order):
        if (top_k != -1 and rank >= top_k) or (rank > 0 and total >= top_p):
            break
        keep.add(token)
        total += float(tempered[token])
    out = torch.tensor([float(tempered[t]) if t in keep else 0.0 for t in range(len(probs))], dtype=torch.float64)
    return (out / out.sum()).tolist()


SAMPLING_CASES = [  # (temperature, top_k, top_p): each case's distribution differs from its neighbours'
    (1.0, -1, 1.0),
    (0.5, -1, 1.0),  # colder: the best token gains
    (2.0, -1, 1.0),  # warmer: flatter
    (2.0, -1, 0.7),  # tempered first: 0.38 + 0.29 < 0.7 keeps three tokens (untempered, two: 0.5 + 0.3)
    (0.5, -1, 0.6),  # tempered: the best token alone (0.68) covers 0.6 (untempered, two: 0.5 + 0.3)
    (2.0, 2, 1.0),
    (0.7, 3, 0.9),
]


@pytest.mark.stubs("Sampler.sample", "top_k_top_p_filter")
@pytest.mark.parametrize("temperature,top_k,top_p", SAMPLING_CASES)
def test_sampling_frequencies_follow_temperature_then_filters(temperature, top_k, top_p):
    probs = [0.5, 0.3, 0.15, 0.05]
    want = nucleus_float64(probs, temperature, top_k, top_p)
    n = 6000
    logits = torch.tensor(probs).log().repeat(n, 1)
    args = BatchSamplingArgs(torch.full((n,), temperature), torch.full((n,), top_k), torch.full((n,), top_p))
    tokens = Sampler("cpu", seed=2).sample(logits, args)
    freq = (torch.bincount(tokens.long(), minlength=4).double() / n).tolist()
    never = [t for t in range(4) if want[t] == 0.0 and freq[t] > 0]
    assert not never, f"tokens {never} are outside the filters yet were sampled: {freq} vs {want}"
    # 6000 draws: a frequency's standard deviation is at most 0.0065, 0.03 is over 4.5 of them.
    worst = max(abs(f - w) for f, w in zip(freq, want))
    assert worst < 0.03, f"T={temperature}, top_k={top_k}, top_p={top_p}: frequencies {freq} vs {want}"


@pytest.mark.stubs("Sampler.sample", "top_k_top_p_filter")
def test_temperature_sampling_follows_the_softmax():
    probs = torch.tensor([0.6, 0.3, 0.1])
    logits = torch.log(probs).repeat(4000, 1)
    sampler = Sampler("cpu", seed=1)
    args = BatchSamplingArgs(torch.ones(4000), torch.full((4000,), -1), torch.ones(4000))
    counts = torch.bincount(sampler.sample(logits, args).long(), minlength=3).float() / 4000
    assert torch.allclose(counts, probs, atol=0.03), f"frequencies {counts.tolist()} vs {probs.tolist()}"
    mixed = BatchSamplingArgs(torch.tensor([0.0, 2.0]), torch.tensor([-1, -1]), torch.tensor([1.0, 1.0]))
    assert all(sampler.sample(logits[:2], mixed)[0] == 0 for _ in range(10)), "greedy rows stay greedy"


def test_sampling_args_from_requests():
    from minisgl.core import Req

    def req(**kw):
        return Req(torch.ones(2, dtype=torch.int32), 0, 0, 4, 0, SamplingParams(**kw))

    greedy = BatchSamplingArgs.from_reqs([req(), req(top_k=1, temperature=0.7)], "cpu")
    assert greedy.temperatures is None, "a batch of greedy requests (top_k=1 included) takes the argmax path"
    args = BatchSamplingArgs.from_reqs([req(), req(temperature=0.7, top_p=0.9)], "cpu")
    assert args.temperatures.tolist() == pytest.approx([0.0, 0.7]), f"temperatures {args.temperatures.tolist()}"
    assert args.top_p.tolist()[1] == pytest.approx(0.9), f"top_p {args.top_p.tolist()}"


@pytest.mark.parametrize("prompt, params, message", [
    ([], SamplingParams(max_tokens=4), "empty prompt"),
    ([1, 2, 10**6], SamplingParams(max_tokens=4), "outside the vocabulary"),
    ([1, -1], SamplingParams(max_tokens=4), "outside the vocabulary"),
    (list(range(1, 60)), SamplingParams(max_tokens=8), "exceeds max_seq_len"),
])
@pytest.mark.stubs("Engine.forward_batch")
def test_bad_input_is_refused_before_any_state_changes(prompt, params, message):
    eng = Engine(EngineConfig(model_path("tiny-qwen3"), max_running_reqs=2, max_seq_len=64, num_pages=128))
    batcher = ManualBatcher(eng)
    running = batcher.add([5, 6, 7], SamplingParams(max_tokens=3, ignore_eos=True))
    rows, slots = batcher.table_manager.available_size, batcher.cache_manager.available_size
    with pytest.raises(ValueError, match=message):
        batcher.add(prompt, params)
    assert (batcher.table_manager.available_size, batcher.cache_manager.available_size) == (rows, slots), "nothing was allocated"
    batcher.run([running])  # the other request still runs
    assert len(running.output_ids) == 3, f"the running request produced {running.output_ids}"
    batcher.release(running)
    assert_clean(batcher)


def test_max_tokens_below_one_is_refused():
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=0)


@pytest.mark.parametrize("field, value", [("num_pages", 0), ("max_seq_len", 0), ("max_seq_len", -5),
                                          ("num_pages", 2.5), ("num_pages", True)])
def test_sizes_are_positive_integers_or_none(field, value):
    with pytest.raises(ValueError, match=f"{field} must be a positive integer or None"):
        EngineConfig(model_path("tiny-qwen3"), **{field: value})


@pytest.mark.stubs(*ENGINE_STUBS)
def test_two_engines_in_one_process_each_run_their_own_model():
    """Each engine forwards with its own context: the older one keeps working after a newer one is made."""
    first = Engine(EngineConfig(model_path("tiny-qwen3"), max_running_reqs=2, max_seq_len=64, num_pages=128))
    second = Engine(EngineConfig(model_path("tiny-llama"), max_running_reqs=2, max_seq_len=64, num_pages=128))
    params = SamplingParams(max_tokens=5, ignore_eos=True)
    for name, eng in [("tiny-qwen3", first), ("tiny-llama", second), ("tiny-qwen3", first)]:
        batcher = ManualBatcher(eng)
        prompt = prompt_ids(name, 1)[0]
        assert batcher.generate([prompt], params)[0] == hf_greedy(name, prompt, 5), f"{name} differs from HF"
        assert_clean(batcher)


@pytest.mark.stubs("Sampler.sample")
def test_a_seeded_request_samples_the_same_tokens_in_any_batch():
    """A request with a seed draws with its own generator (seed, position): the same tokens whatever shares its
    batch and whatever the sampler's own generator did before; other rows keep using the sampler's generator."""
    from minisgl.core import Req

    def req(seed, position, **kw):
        return Req(torch.ones(position, dtype=torch.int32), 0, 0, position, 0,
                   SamplingParams(temperature=1.0, seed=seed, **kw))

    logits = torch.randn(8, 50, generator=torch.Generator().manual_seed(0))
    alone = [Sampler("cpu", seed=s).sample(logits[3:4], BatchSamplingArgs.from_reqs([req(7, 5)], "cpu")).item()
             for s in range(4)]
    assert len(set(alone)) == 1, f"seed 7 drew {alone} with different sampler seeds: the row must use its own generator"
    batch = [req(None, 5) for _ in range(8)]
    batch[3] = req(7, 5)
    draws = set()
    for s in range(4):
        draws.add(Sampler("cpu", seed=s).sample(logits.clone(), BatchSamplingArgs.from_reqs(batch, "cpu"))[3].item())
        logits[[0, 1, 2, 4]] = logits[[4, 2, 1, 0]]  # other rows change, row 3 does not
    assert draws == {alone[0]}, f"the seeded row drew {sorted(draws)} in a batch, {alone[0]} alone"
    runs = [[Sampler("cpu", seed=0).sample(logits[3:4], BatchSamplingArgs.from_reqs([req(seed, pos)], "cpu")).item()
             for pos in range(1, 30)] for seed in (7, 8)]
    assert runs[0] != runs[1], "seeds 7 and 8 drew the same 29 tokens: the seed must pick the generator"
    unseeded = {Sampler("cpu", seed=s).sample(logits[:1].repeat(64, 1), BatchSamplingArgs.from_reqs(
        [req(None, 5) for _ in range(64)], "cpu")).sum().item() for s in range(3)}
    assert len(unseeded) > 1, "rows without a seed draw from the sampler's generator (its seed matters)"
