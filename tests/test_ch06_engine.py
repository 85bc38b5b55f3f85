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
    assert together == alone
    assert_clean(batcher)


@pytest.mark.stubs(*ENGINE_STUBS)
def test_eos_stops_a_request_like_hf():
    name = "smollm2"
    eng = Engine(EngineConfig(model_path(name), max_running_reqs=4, max_seq_len=512, num_pages=1024))
    batcher = ManualBatcher(eng)
    prompt = prompt_ids(name, 1)[0]
    out = batcher.generate([prompt], SamplingParams(max_tokens=64))[0]
    ref = hf_greedy(name, prompt, 64, stop_at_eos=True)
    assert out == ref
    assert out[-1] in eng.model_config.eos_token_ids, "the fixture prompt should finish within 64 tokens"
    assert_clean(batcher)


@pytest.mark.stubs("Engine._num_kv_pages")
def test_kv_pool_is_sized_from_memory():
    path = model_path("tiny-qwen3")
    eng = Engine(EngineConfig(path, max_running_reqs=2, max_seq_len=64, cpu_kv_cache_mb=1))
    per_token = eng.kv_bytes_per_token
    assert eng.num_pages == min(2**20 // per_token, 2 * 64)
    big = Engine(EngineConfig(path, max_running_reqs=2, max_seq_len=64, cpu_kv_cache_mb=64))
    assert big.num_pages == 128, "never more pages than the page table can address"
    paged = Engine(EngineConfig(path, max_running_reqs=2, max_seq_len=64, page_size=4, cpu_kv_cache_mb=64))
    assert paged.num_pages == 32 and paged.kv_cache.num_slots == 128
    with pytest.raises(ValueError, match="no room"):
        Engine(EngineConfig(path, cpu_kv_cache_mb=0))


@pytest.mark.stubs("Sampler.sample")
def test_greedy_and_top_k_1_take_the_argmax():
    logits = torch.tensor([[0.1, 3.0, 0.2], [5.0, 1.0, 4.9]])
    sampler = Sampler("cpu", seed=0)
    greedy = BatchSamplingArgs(temperatures=None)
    assert sampler.sample(logits, greedy).tolist() == [1, 0]
    args = BatchSamplingArgs(torch.tensor([1.0, 1.0]), torch.tensor([1, 1]), torch.tensor([1.0, 1.0]))
    for _ in range(20):
        assert sampler.sample(logits, args).tolist() == [1, 0]


@pytest.mark.stubs("top_k_top_p_filter")
def test_top_k_top_p_filter():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.3, 0.5]]))
    kept = top_k_top_p_filter(logits, torch.tensor([2, -1]), torch.tensor([1.0, 0.6]))
    assert torch.isfinite(kept[0]).tolist() == [True, True, False, False], "top-k 2 keeps the best two"
    assert torch.isfinite(kept[1]).tolist() == [False, False, True, True], "top-p 0.6 needs 0.5 + 0.3"
    tiny_p = top_k_top_p_filter(logits, torch.tensor([-1, -1]), torch.tensor([1e-6, 1e-6]))
    assert torch.isfinite(tiny_p).sum(-1).tolist() == [1, 1], "the best token always survives"


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

    assert BatchSamplingArgs.from_reqs([req(), req(top_k=1, temperature=0.7)], "cpu").temperatures is None
    args = BatchSamplingArgs.from_reqs([req(), req(temperature=0.7, top_p=0.9)], "cpu")
    assert args.temperatures.tolist() == pytest.approx([0.0, 0.7]) and args.top_p.tolist()[1] == pytest.approx(0.9)


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
    assert len(running.output_ids) == 3
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
