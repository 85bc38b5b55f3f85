"""Chapter 7: the scheduler loop and LLM.generate, with continuous batching, against HF greedy."""

from __future__ import annotations

import pytest
import torch

from helpers import MODEL_NAMES, assert_clean, hf_greedy, model_path, pending, prompt_ids
from minisgl.core import SamplingParams
from minisgl.engine import Engine, EngineConfig
from minisgl.llm import LLM
from minisgl.scheduler.decode import DecodeManager
from minisgl.scheduler.prefill import PrefillAdder, PrefillManager
from minisgl.scheduler.scheduler import Scheduler

LOOP_STUBS = ("Scheduler.schedule_next_batch", "Scheduler._process_last_data", "PrefillManager.schedule_next_batch",
              "PrefillAdder.try_add_one", "DecodeManager.reserved_slots")




@pytest.fixture(scope="module")
def tiny_engine():
    return Engine(EngineConfig(model_path("tiny-qwen3"), max_running_reqs=3, max_seq_len=64, num_pages=40))


@pytest.mark.stubs("PrefillAdder.try_add_one")
def test_adder_respects_budget_rows_and_reservation(tiny_engine):
    eng = tiny_engine
    sched = Scheduler(eng)  # owns the table and cache managers
    adder = PrefillAdder(token_budget=10, table=sched.table_manager, cache=sched.cache_manager, reserved=5)
    assert adder.try_add_one(pending(0, 6, 4)) is not None  # 9 slots: 5 + 9 <= 40
    assert adder.try_add_one(pending(2, 4, 30)) is None, "5 + 9 reserved + 33 needed exceed 40 free slots"
    req = adder.try_add_one(pending(3, 4, 20))  # 5 + 9 + 23 = 37 <= 40
    assert req is not None and adder.token_budget == 0 and adder.reserved == 37
    assert sched.table_manager.token_pool[req.table_idx, :4].tolist() == [1, 2, 3, 4], "the prompt is in the token pool"
    assert req.cached_len == 0 and req.extend_len == 4
    assert adder.try_add_one(pending(4, 1, 1)) is None, "no budget left"
    for r in adder.reqs:
        sched.table_manager.free(r.table_idx)
    assert_clean(sched)


@pytest.mark.superseded(10, "chunked prefill runs a prompt longer than the budget in chunks")
@pytest.mark.stubs("PrefillAdder.try_add_one")
def test_a_prompt_longer_than_the_remaining_budget_waits(tiny_engine):
    eng = tiny_engine
    sched = Scheduler(eng)  # owns the table and cache managers
    adder = PrefillAdder(token_budget=10, table=sched.table_manager, cache=sched.cache_manager, reserved=0)
    assert adder.try_add_one(pending(0, 6, 4)) is not None
    assert adder.try_add_one(pending(1, 5, 2)) is None, "6 + 5 tokens exceed the budget of 10"
    assert adder.token_budget == 4 and len(adder.reqs) == 1
    sched.table_manager.free(adder.reqs[0].table_idx)
    assert_clean(sched)


@pytest.mark.stubs("PrefillManager.schedule_next_batch")
def test_prefill_manager_is_first_come_first_served(tiny_engine):
    eng = tiny_engine
    sched = Scheduler(eng)  # owns the table and cache managers
    manager = PrefillManager(sched.table_manager, sched.cache_manager, max_extend_tokens=12)
    for p in [pending(0, 5, 2), pending(1, 9, 30), pending(2, 2, 1)]:  # 6, 38 and 2 slots over their lives
        manager.add(p)
    batch = manager.schedule_next_batch(reserved=0)
    assert [r.uid for r in batch.reqs] == [0], "request 1 needs 38 of the 34 slots left, and 2 may not overtake it"
    assert [p.uid for p in manager.pending] == [1, 2]
    sched.table_manager.free(batch.reqs[0].table_idx)
    assert manager.schedule_next_batch(reserved=39) is None, "nothing fits when the running requests hold the pool"
    batch = manager.schedule_next_batch(reserved=0)
    assert [r.uid for r in batch.reqs] == [1, 2]
    for r in batch.reqs:
        sched.table_manager.free(r.table_idx)
    assert_clean(sched)


@pytest.mark.stubs("DecodeManager.reserved_slots")
def test_running_requests_reserve_their_remaining_tokens():
    from minisgl.core import Req

    manager = DecodeManager()
    reqs = [Req(torch.ones(3, dtype=torch.int32), i, 0, n, i, SamplingParams(max_tokens=n)) for i, n in enumerate([4, 1])]
    for r in reqs:
        r.complete_one()  # after prefill: one token generated each
    manager.add(reqs)
    assert manager.reserved_slots() == 3 + 0
    assert manager.schedule_next_batch().is_decode


@pytest.mark.stubs("Scheduler.schedule_next_batch")
def test_prefill_goes_first(tiny_engine):
    scheduler = Scheduler(tiny_engine)
    assert scheduler.schedule_next_batch() is None
    scheduler.add_request(pending(0, 3, 2))
    batch = scheduler.schedule_next_batch()
    assert batch.is_prefill and [r.uid for r in batch.reqs] == [0]
    scheduler.table_manager.free(batch.reqs[0].table_idx)
    assert_clean(scheduler)


@pytest.mark.stubs("Scheduler._process_last_data")
def test_finished_requests_leave_and_free_everything(tiny_engine):
    from minisgl.core import Batch, Req

    eng = tiny_engine
    scheduler = Scheduler(eng)
    reqs = []
    for uid, max_tokens in [(0, 1), (1, 3)]:
        row = scheduler.table_manager.allocate()
        ids = torch.tensor([3, 4, 5], dtype=torch.int32)
        scheduler.table_manager.token_pool[row, :3] = ids
        reqs.append(Req(ids, row, 0, max_tokens, uid, SamplingParams(max_tokens=max_tokens, ignore_eos=True)))
    batch = Batch(reqs, "prefill")
    scheduler.prepare_batch(batch)
    tokens = eng.forward_batch(batch).tolist()
    scheduler._process_last_data(batch, tokens)
    assert list(scheduler.finished) == [0], "max_tokens=1: done after prefill"
    assert scheduler.finished[0].output_ids == [tokens[0]]
    assert scheduler.table_manager.available_size == scheduler.table_manager.max_running_reqs - 1, "the finished request's row is free"
    assert scheduler.cache_manager.available_size == eng.kv_cache.num_slots - 3, "and so are its 3 KV slots"
    decode = Batch([reqs[1]], "decode")
    for _ in range(2):
        scheduler.prepare_batch(decode)
        scheduler._process_last_data(decode, eng.forward_batch(decode).tolist())
    assert sorted(scheduler.finished) == [0, 1] and not scheduler.decode_manager.running
    assert_clean(scheduler)


@pytest.mark.superseded(11, "requests join the decode set when their prefill is launched, not when it is processed")
@pytest.mark.stubs("Scheduler._process_last_data")
def test_unfinished_prefill_requests_join_the_decode_set(tiny_engine):
    from minisgl.core import Batch, Req

    eng = tiny_engine
    scheduler = Scheduler(eng)
    row = scheduler.table_manager.allocate()
    req = Req(torch.tensor([3, 4], dtype=torch.int32), row, 0, 2, 0, SamplingParams(max_tokens=2, ignore_eos=True))
    scheduler.table_manager.token_pool[row, :2] = req.input_ids
    batch = Batch([req], "prefill")
    scheduler.prepare_batch(batch)
    scheduler._process_last_data(batch, eng.forward_batch(batch).tolist())
    assert scheduler.decode_manager.running == [req], "the request decodes from the next step on"
    decode = Batch([req], "decode")
    scheduler.prepare_batch(decode)
    scheduler._process_last_data(decode, eng.forward_batch(decode).tolist())
    assert not scheduler.decode_manager.running and list(scheduler.finished) == [0]
    assert_clean(scheduler)


@pytest.mark.parametrize("name", MODEL_NAMES)
@pytest.mark.stubs(*LOOP_STUBS, "LLM.generate")
def test_generate_matches_hf(name):
    llm = LLM(model_path(name), max_running_reqs=4, max_seq_len=256)
    prompts = prompt_ids(name, 3)
    outputs = llm.generate(prompts, SamplingParams(max_tokens=10, ignore_eos=True))
    for prompt, out in zip(prompts, outputs):
        assert out["token_ids"] == hf_greedy(name, prompt, 10)
        assert isinstance(out["text"], str)
    assert_clean(llm)


@pytest.mark.stubs(*LOOP_STUBS, "LLM.generate")
def test_continuous_batching_requests_join_and_leave():
    name = "tiny-llama"
    llm = LLM(model_path(name), max_running_reqs=2, max_seq_len=128)
    prompts = prompt_ids(name, 4)
    max_tokens = [2, 8, 3, 5]
    outputs = llm.generate(prompts, [SamplingParams(max_tokens=n, ignore_eos=True) for n in max_tokens])
    for prompt, n, out in zip(prompts, max_tokens, outputs):
        assert out["token_ids"] == hf_greedy(name, prompt, n)
    history = llm.scheduler.history
    first_decode = next(i for i, (phase, _) in enumerate(history) if phase == "decode")
    late_prefills = [uids for phase, uids in history[first_decode:] if phase == "prefill"]
    assert late_prefills, "waiting requests join while others are decoding"
    assert max(len(uids) for _, uids in history) <= 2, "never more running requests than table rows"
    decodes_of_0 = sum(0 in uids for phase, uids in history if phase == "decode")
    assert decodes_of_0 == 1, "request 0 (2 tokens) leaves after one decode step"
    assert_clean(llm)


@pytest.mark.stubs(*LOOP_STUBS, "LLM.generate")
def test_small_pool_makes_requests_wait_not_crash():
    name = "tiny-qwen3"
    prompts = prompt_ids(name, 4)
    need = max(len(p) for p in prompts) + 12 - 1
    llm = LLM(model_path(name), max_running_reqs=4, max_seq_len=128, num_pages=need + 3)  # room for one at a time
    outputs = llm.generate(prompts, SamplingParams(max_tokens=12, ignore_eos=True))
    for prompt, out in zip(prompts, outputs):
        assert out["token_ids"] == hf_greedy(name, prompt, 12)
    assert max(len(uids) for _, uids in llm.scheduler.history) == 1, "the pool only ever fits one request"
    assert_clean(llm)


@pytest.mark.stubs(*LOOP_STUBS, "LLM.generate")
def test_generate_stops_at_eos_like_hf():
    name = "smollm2"
    llm = LLM(model_path(name), max_running_reqs=4, max_seq_len=512)
    prompts = prompt_ids(name, 2)
    outputs = llm.generate(prompts, SamplingParams(max_tokens=48))
    for prompt, out in zip(prompts, outputs):
        assert out["token_ids"] == hf_greedy(name, prompt, 48, stop_at_eos=True)
    assert "Paris" in outputs[0]["text"]
    assert_clean(llm)


@pytest.mark.stubs("LLM.generate")
def test_bad_input_is_refused_before_anything_is_queued():
    llm = LLM(model_path("tiny-qwen3"), max_running_reqs=2, max_seq_len=64, num_pages=30)
    good = [5, 6, 7]
    for prompts, params, message in [
        ([good, []], SamplingParams(max_tokens=2), "empty prompt"),
        ([good, [1, 99999]], SamplingParams(max_tokens=2), "outside the vocabulary"),
        ([good, good], [SamplingParams(max_tokens=2)], "2 prompts but 1 sampling params"),
        ([good, list(range(1, 28))], SamplingParams(max_tokens=8), "whole pool has 30"),
    ]:
        with pytest.raises(ValueError, match=message):
            llm.generate(prompts, params)
        assert llm.scheduler.idle, "nothing was queued"
    assert_clean(llm)


class InjectedFault(RuntimeError):
    """The error a test plants inside a step."""


def plant_fault(llm: LLM, where: str, at_call: int, monkeypatch) -> None:
    """Make the `at_call`-th call of one piece of a step fail: the model's forward pass, the sampler, the
    per-token callback, or an interrupt (Ctrl-C) in the forward pass."""
    calls = {"n": 0}

    def failing(original, error):
        def wrapper(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == at_call:
                raise error
            return original(*args, **kwargs)
        return wrapper

    if where == "forward":
        monkeypatch.setattr(llm.engine.model, "forward", failing(llm.engine.model.forward, InjectedFault("forward")))
    elif where == "interrupt":
        monkeypatch.setattr(llm.engine.model, "forward", failing(llm.engine.model.forward, KeyboardInterrupt()))
    elif where == "sampler":
        monkeypatch.setattr(llm.engine.sampler, "sample", failing(llm.engine.sampler.sample, InjectedFault("sample")))
    else:
        llm.scheduler.on_token = failing(lambda req, token: None, InjectedFault("on_token"))


@pytest.mark.stubs(*LOOP_STUBS, "LLM.generate")
@pytest.mark.parametrize("at_call", [1, 4])
@pytest.mark.parametrize("where", ["forward", "sampler", "on_token", "interrupt"])
def test_a_step_that_fails_aborts_the_run_and_the_llm_serves_the_next_call(where, at_call, monkeypatch):
    name = "tiny-qwen3"
    llm = LLM(model_path(name), max_running_reqs=2, max_seq_len=96)
    prompts = prompt_ids(name, 3)
    params = SamplingParams(max_tokens=5, ignore_eos=True)
    plant_fault(llm, where, at_call, monkeypatch)
    with pytest.raises(KeyboardInterrupt if where == "interrupt" else InjectedFault):
        llm.generate(prompts, params)
    assert llm.scheduler.idle and not llm.scheduler.finished, "the failed call's requests were all dropped"
    assert_clean(llm)
    monkeypatch.undo()
    llm.scheduler.on_token = None
    outputs = llm.generate(prompts, params)
    for prompt, out in zip(prompts, outputs):
        assert out["token_ids"] == hf_greedy(name, prompt, 5), "the call after a failure differs from HF"
    assert_clean(llm)


@pytest.mark.stubs("LLM.generate")
def test_prompts_of_the_wrong_type_are_refused_not_coerced():
    llm = LLM(model_path("tiny-qwen3"), max_running_reqs=2, max_seq_len=64, num_pages=30)
    for prompts, message in [
        ([[5.9, 17.2, 300.7]], "5.9 is not an integer"),
        ([[True, 5]], "True is not an integer"),
        ([b"\x05\x06"], "got bytes"),
        ([[5, 2**31]], "is not an integer in"),
        ([[5, float("nan")]], "nan is not an integer"),
        (["bad \ud800 text"], "not valid text"),
        ([7], "got int"),
    ]:
        with pytest.raises(ValueError, match=message):
            llm.generate(prompts, SamplingParams(max_tokens=2))
        assert llm.scheduler.idle, "nothing was queued"
    with pytest.raises(ValueError, match="got dict"):
        llm.generate([[5, 6]], {"max_tokens": 2})
    numpy = pytest.importorskip("numpy")
    out = llm.generate([numpy.array([5, 6, 7], dtype=numpy.int64), torch.tensor([5, 6, 7])],
                       SamplingParams(max_tokens=2, ignore_eos=True))
    assert out[0]["token_ids"] == out[1]["token_ids"] == hf_greedy("tiny-qwen3", [5, 6, 7], 2)
    assert_clean(llm)


@pytest.mark.stubs("LLM.generate")
def test_one_text_prompt_is_one_request():
    llm = LLM(model_path("tiny-qwen3"), max_running_reqs=2, max_seq_len=64, num_pages=30)
    alone = llm.generate("hello", SamplingParams(max_tokens=3, ignore_eos=True))
    listed = llm.generate(["hello"], SamplingParams(max_tokens=3, ignore_eos=True))
    assert len(alone) == 1 and alone == listed, f"a text prompt on its own: {alone} vs {listed}"
    assert len(llm.scheduler.history) == 3, "history holds the last call's batches only (1 prefill + 2 decodes)"


@pytest.mark.stubs("LLM.generate")
def test_sampling_params_changed_after_construction_are_checked_when_queued():
    llm = LLM(model_path("tiny-qwen3"), max_running_reqs=2, max_seq_len=64, num_pages=30)
    params = SamplingParams(max_tokens=3)
    params.max_tokens = -200
    with pytest.raises(ValueError, match="max_tokens must be an integer >= 1, got -200"):
        llm.generate([[5, 6, 7]], params)
    assert llm.scheduler.idle
    assert_clean(llm)


@pytest.mark.stubs(*LOOP_STUBS, "LLM.generate")
def test_a_temperature_too_small_to_divide_by_samples_greedily():
    name = "tiny-qwen3"
    llm = LLM(model_path(name), max_running_reqs=2, max_seq_len=64)
    prompt = prompt_ids(name, 1)[0]
    out = llm.generate([prompt], SamplingParams(temperature=1e-45, max_tokens=4, ignore_eos=True))
    assert out[0]["token_ids"] == hf_greedy(name, prompt, 4)
    assert_clean(llm)
