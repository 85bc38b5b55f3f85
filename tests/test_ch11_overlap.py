"""Chapter 11: overlap scheduling. The next batch is launched before the last one's results are processed;
outputs are identical with overlap on and off, and no request is finished or freed twice."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
import torch

from helpers import assert_clean, hf_greedy, model_path, prompt_ids, tokenizer
from minisgl.core import Batch, Req, SamplingParams
from minisgl.engine import Engine, EngineConfig
from minisgl.llm import LLM
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.decode import DecodeManager
from minisgl.scheduler.prefill import ChunkedReq
from minisgl.scheduler.scheduler import Scheduler
from minisgl.scheduler.utils import PendingReq
from test_ch07_scheduler import InjectedFault, plant_fault
from test_ch10_chunked_prefill import check_trace, trace_run

LOOP_STUBS = ("Scheduler.overlap_step", "Scheduler._launch", "Scheduler._process_last_data",
              "DecodeManager.schedule_next_batch")



def count_frees(scheduler: Scheduler) -> Counter:
    """Wrap cache_req to count how often each request is freed (finished=True)."""
    frees, original = Counter(), scheduler.cache_manager.cache_req

    def counted(req, finished):
        if finished:
            frees[req.uid] += 1
        original(req, finished)

    scheduler.cache_manager.cache_req = counted
    return frees


@pytest.mark.stubs("DecodeManager.schedule_next_batch")
def test_decode_batch_skips_requests_that_are_done_on_the_device():
    manager = DecodeManager()
    assert manager.schedule_next_batch() is None
    a = Req(torch.ones(3, dtype=torch.int32), 0, 0, 2, 0, SamplingParams(max_tokens=2))
    b = Req(torch.ones(3, dtype=torch.int32), 1, 0, 1, 1, SamplingParams(max_tokens=1))
    for r in (a, b):
        r.complete_one()
    manager.add([a, b])
    assert manager.schedule_next_batch().reqs == [a], "b generated its only token: its result is still on its way"
    a.complete_one()
    assert manager.schedule_next_batch() is None


@pytest.mark.stubs("Scheduler._process_last_data")
def test_results_of_freed_requests_and_chunks_are_skipped():
    eng = Engine(EngineConfig(model_path("tiny-qwen3"), max_running_reqs=3, max_seq_len=64, num_pages=60))
    scheduler = Scheduler(eng, SchedulerConfig(overlap=True))
    reqs = []
    for uid, (cls, max_tokens) in enumerate([(Req, 3), (Req, 1), (ChunkedReq, 4)]):
        row = scheduler.table_manager.allocate()
        ids = torch.tensor([5, 6, 7], dtype=torch.int32)
        scheduler.table_manager.token_pool[row, :3] = ids
        reqs.append(cls(ids, row, 0, max_tokens, uid, SamplingParams(max_tokens=max_tokens, ignore_eos=True)))
    prefill = Batch(reqs, "prefill")
    scheduler.prepare_batch(prefill)
    tokens = eng.forward_batch(prefill).tolist()
    scheduler.decode_manager.add([reqs[0]])  # what launching the batch does
    scheduler._process_last_data(prefill, tokens)
    assert list(scheduler.finished) == [1] and scheduler._freed == {1}
    assert (reqs[1].finish_reason, reqs[0].finish_reason) == ("length", None), \
        f"request 1 reached max_tokens (finish_reason 'length'), request 0 goes on (None): " \
        f"got {reqs[1].finish_reason!r} and {reqs[0].finish_reason!r}"
    assert reqs[0].output_ids == [tokens[0]] and reqs[2].input_ids.tolist() == [5, 6, 7], "a chunk records nothing"
    scheduler._process_last_data(Batch([reqs[1], reqs[0]], "decode"), [11, 12])
    assert reqs[1].output_ids == [tokens[1]], "a request freed after its batch was launched gets no extra token"
    assert reqs[0].output_ids == [tokens[0], 12] and scheduler._freed == set()
    scheduler._process_last_data(Batch([reqs[0]], "decode"), [13])
    assert sorted(scheduler.finished) == [0, 1] and not scheduler.decode_manager.running
    scheduler.cache_manager.cache_req(reqs[2], finished=True)  # the chunk's pages: freed as an abort would
    scheduler.table_manager.free(reqs[2].table_idx)
    assert_clean(scheduler)


@pytest.mark.stubs(*LOOP_STUBS)
def test_the_next_batch_is_launched_before_the_last_is_processed():
    name = "tiny-llama"
    events = {}
    for overlap in (False, True):
        llm = LLM(model_path(name), max_running_reqs=2, max_seq_len=128, overlap=overlap)
        log = []
        llm.scheduler.on_batch = lambda b: log.append("launch")
        llm.scheduler.on_token = lambda r, t: log.append("token")
        outputs = llm.generate(prompt_ids(name, 2), SamplingParams(max_tokens=5, ignore_eos=True))
        events[overlap] = "".join("L" if e == "launch" else "t" for e in log)
        assert [o["token_ids"] for o in outputs] == [hf_greedy(name, p, 5) for p in prompt_ids(name, 2)]
        assert_clean(llm)
    assert events[False] == "Ltt" * 5, "without overlap: launch a batch, record its two tokens, launch the next"
    assert events[True] == "L" + "Ltt" * 4 + "tt", "with overlap: the next launch comes before the last tokens"


class FakeEvent:
    """Stands for the CUDA event recorded after a batch's tokens start their copy to the host."""

    def __init__(self, batch: int) -> None:
        self.batch, self.fired = batch, False

    def synchronize(self) -> None:
        self.fired = True


class HostTokens(torch.Tensor):
    """A batch's tokens in host memory that a copy is still filling (on a GPU): reading them before their event
    has fired reads whatever was there before."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for a in args:
            if isinstance(a, HostTokens) and not a.event.fired:
                raise AssertionError(f"the tokens of batch {a.event.batch} were read before its ready event was "
                                     "waited on: process a launched batch through _process, which waits first")
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.stubs("Scheduler.overlap_step", "Scheduler._launch")
def test_results_are_read_only_after_their_ready_event():
    """On the CPU _launch gives no event (the tokens are there); on a GPU they are not, so every launched batch
    here gets a fake one, and its tokens refuse to be read before it fires."""
    name = "tiny-llama"
    llm = LLM(model_path(name), max_running_reqs=2, max_seq_len=128, overlap=True)
    launch, events = llm.scheduler._launch, []

    def launch_with_event(batch):
        data = launch(batch)
        events.append(FakeEvent(len(events)))
        tokens = data.next_tokens.as_subclass(HostTokens)
        tokens.event = events[-1]
        return data._replace(next_tokens=tokens, ready=events[-1])

    llm.scheduler._launch = launch_with_event
    prompts = prompt_ids(name, 2)
    outputs = llm.generate(prompts, SamplingParams(max_tokens=5, ignore_eos=True))
    assert [o["token_ids"] for o in outputs] == [hf_greedy(name, p, 5) for p in prompts]
    assert events and all(e.fired for e in events), f"batches never waited for: {[e.batch for e in events if not e.fired]}"
    assert_clean(llm)


@pytest.mark.stubs(*LOOP_STUBS)
@pytest.mark.parametrize("cache_type,budget,page_size",
                         list(itertools.product(["naive", "radix"], [8, 8192], [1, 4])))
def test_outputs_identical_with_overlap_on_and_off(cache_type, budget, page_size):
    name = "tiny-qwen3"
    tok = tokenizer(name)
    shared = tok.encode("A cache of keys and values saves work, ")
    prompts = [shared + tok.encode(t) for t in ("and time.", "so the next step is fast.", "twice over.")]
    prompts += prompt_ids(name, 3)
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (3, 9, 1, 6, 12, 4)]
    runs = {}
    for overlap in (False, True):
        llm = LLM(model_path(name), max_running_reqs=3, max_seq_len=128, max_extend_tokens=budget,
                  page_size=page_size, cache_type=cache_type, overlap=overlap, num_pages=120 // page_size)
        frees = count_frees(llm.scheduler)
        tokens = Counter()
        llm.scheduler.on_token = lambda r, t: tokens.update([r.uid])
        runs[overlap] = [o["token_ids"] for o in llm.generate(prompts, params)]
        assert all(v == 1 for v in frees.values()) and len(frees) == len(prompts), "each request freed once"
        assert [tokens[i] for i in range(len(prompts))] == [p.max_tokens for p in params], "no token recorded twice"
        assert_clean(llm)
    assert runs[True] == runs[False]
    assert runs[True] == [hf_greedy(name, p, s.max_tokens) for p, s in zip(prompts, params)]


@pytest.mark.stubs(*LOOP_STUBS)
def test_eos_under_overlap_costs_one_wasted_step_not_a_wrong_token():
    name = "smollm2"
    prompts = prompt_ids(name, 3)
    results = {}
    for overlap in (False, True):
        llm = LLM(model_path(name), max_running_reqs=3, max_seq_len=512, overlap=overlap)
        frees = count_frees(llm.scheduler)
        outputs = llm.generate(prompts, SamplingParams(max_tokens=40))
        results[overlap] = ([o["token_ids"] for o in outputs], llm.scheduler.history)
        assert all(v == 1 for v in frees.values())
        assert_clean(llm)
    for prompt, out in zip(prompts, results[True][0]):
        assert out == hf_greedy(name, prompt, 40, stop_at_eos=True)
    assert results[True][0] == results[False][0]
    eos_first = min(range(3), key=lambda i: len(results[True][0][i]))
    assert len(results[True][0][eos_first]) < 40, "the fixture needs a request that stops at EOS"
    decodes = {ov: sum(eos_first in uids for phase, uids in hist if phase == "decode")
               for ov, (_, hist) in results.items()}
    assert decodes[True] == decodes[False] + 1, "launched once more before its EOS was seen on the CPU"


@pytest.mark.stubs(*LOOP_STUBS)
def test_chunked_trace_with_page_size_4_and_overlap():
    check_trace(*trace_run(4, overlap=True))


@pytest.mark.stubs(*LOOP_STUBS)
def test_abort_while_its_batch_is_in_flight():
    name = "tiny-qwen3"
    eng = Engine(EngineConfig(model_path(name), max_running_reqs=3, max_seq_len=96, num_pages=90))
    scheduler = Scheduler(eng, SchedulerConfig(max_extend_tokens=8, overlap=True))
    frees = count_frees(scheduler)
    prompts = prompt_ids(name, 3)
    for uid, p in enumerate(prompts):
        scheduler.add_request(PendingReq(uid, torch.tensor(p, dtype=torch.int32),
                                         SamplingParams(max_tokens=6, ignore_eos=True)))
    last = None
    for _ in range(3):
        last = scheduler.overlap_step(last)
    in_flight = {r.uid for r in last.batch.reqs}
    victim = next(iter(in_flight))
    assert scheduler.abort_request(victim)
    while last is not None or not scheduler.idle:
        last = scheduler.overlap_step(last)
    assert victim not in scheduler.finished and all(v == 1 for v in frees.values())
    for uid in set(range(3)) - {victim}:
        assert scheduler.finished[uid].output_ids == hf_greedy(name, prompts[uid], 6)
    assert_clean(scheduler)


@pytest.mark.gpu
@pytest.mark.stubs(*LOOP_STUBS)
@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-llama"])
def test_cuda_loop_on_its_own_stream_matches_hf(name):
    """float32 on CUDA (no TF32) against the CPU float32 reference, chunks, radix and pages of 4, overlap on/off."""
    prompts = prompt_ids(name, 3)
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (7, 12, 3)]
    runs = {}
    for overlap in (False, True):
        llm = LLM(model_path(name), device="cuda", dtype="float32", max_running_reqs=2, max_seq_len=128,
                  page_size=4, max_extend_tokens=8, overlap=overlap)
        assert llm.scheduler.stream is not None and llm.engine.device.type == "cuda"
        frees = count_frees(llm.scheduler)
        runs[overlap] = [o["token_ids"] for o in llm.generate(prompts, params)]
        assert all(v == 1 for v in frees.values()) and len(frees) == 3
        assert_clean(llm)
    assert runs[True] == runs[False] == [hf_greedy(name, p, s.max_tokens) for p, s in zip(prompts, params)]


FAULT_SETTINGS = list(itertools.product(["naive", "radix"], [1, 4], [False, True]))


@pytest.mark.stubs(*LOOP_STUBS)
@pytest.mark.parametrize("cache_type,page_size,overlap", FAULT_SETTINGS)
def test_a_fault_anywhere_in_a_step_leaves_the_engine_consistent(cache_type, page_size, overlap, monkeypatch):
    """Every kind of fault at a point drawn from a fixed seed, with chunks, shared prefixes and batches in flight:
    the error comes out, nothing leaks, and the same LLM then matches HF greedy."""
    name = "tiny-qwen3"
    tok = tokenizer(name)
    shared = tok.encode("A cache of keys and values saves work, ")
    prompts = [shared + tok.encode(t) for t in ("and time.", "so the next step is fast.")] + prompt_ids(name, 2)
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    rng = random.Random(f"{cache_type}-{page_size}-{overlap}")
    llm = LLM(model_path(name), max_running_reqs=3, max_seq_len=128, max_extend_tokens=8, page_size=page_size,
              cache_type=cache_type, overlap=overlap, num_pages=160 // page_size)
    for where in ("forward", "sampler", "on_token", "interrupt"):
        at_call = rng.randint(1, 10)
        plant_fault(llm, where, at_call, monkeypatch)
        with pytest.raises(KeyboardInterrupt if where == "interrupt" else InjectedFault):
            llm.generate(prompts, params)
        assert llm.scheduler.idle and not llm.scheduler.finished, f"{where} at call {at_call}: requests left over"
        assert_clean(llm)
        monkeypatch.undo()
        llm.scheduler.on_token = None
    outputs = llm.generate(prompts, params)
    assert [o["token_ids"] for o in outputs] == [hf_greedy(name, p, 6) for p in prompts]
    assert_clean(llm)


@pytest.mark.stubs(*LOOP_STUBS)
@pytest.mark.parametrize("overlap", [False, True])
def test_an_abort_from_the_token_callback_frees_the_request_once(overlap):
    name = "tiny-qwen3"
    llm = LLM(model_path(name), max_running_reqs=3, max_seq_len=96, overlap=overlap)
    prompts = prompt_ids(name, 3)
    frees = count_frees(llm.scheduler)
    victims = {0: 2, 2: 1}  # request uid -> after how many tokens request 0's callback aborts it
    seen = Counter()

    def on_token(req, token):
        seen[req.uid] += 1
        for uid, after in victims.items():
            if req.uid == 0 and seen[0] == after:
                llm.scheduler.abort_request(uid)

    scheduler = llm.scheduler
    scheduler.on_token = on_token
    for uid, p in enumerate(prompts):
        scheduler.add_request(PendingReq(uid, torch.tensor(p, dtype=torch.int32),
                                         SamplingParams(max_tokens=6, ignore_eos=True)))
    scheduler.run_until_idle()
    assert sorted(scheduler.finished) == [1], "the two aborted requests never finish"
    assert scheduler.finished[1].output_ids == hf_greedy(name, prompts[1], 6)
    assert (seen[0], seen[2]) == (2, 0), f"no token is recorded after an abort (2 goes in 0's batch): {dict(seen)}"
    assert all(n == 1 for n in frees.values()), f"a request was freed twice: {dict(frees)}"
    assert_clean(llm)


def random_workload(seed: int, vocab: int) -> tuple[dict, list[list[int]], list[int]]:
    """An engine setting and a few requests, all drawn from `seed`: prompts share prefixes now and then."""
    rng = random.Random(seed)
    config = dict(page_size=rng.choice([1, 4, 16]), cache_type=rng.choice(["naive", "radix"]),
                  overlap=rng.random() < 0.5, max_extend_tokens=rng.choice([8, 16, 64]),
                  max_running_reqs=rng.choice([2, 3, 4]))
    base = [rng.randrange(vocab) for _ in range(24)]
    prompts = [base[: rng.randint(1, 24)] + [rng.randrange(vocab) for _ in range(rng.randint(1, 24))]
               for _ in range(rng.randint(3, 6))]
    return config, prompts, [rng.randint(1, 10) for _ in prompts]


@pytest.mark.stubs(*LOOP_STUBS)
@pytest.mark.parametrize("seed", range(6))
def test_random_workloads_match_hf_greedy(seed):
    name = "tiny-qwen3"
    config, prompts, max_tokens = random_workload(seed, vocab=tokenizer(name).vocab_size)
    llm = LLM(model_path(name), max_seq_len=64, num_pages=2048 // config["page_size"], **config)
    outputs = llm.generate(prompts, [SamplingParams(max_tokens=n, ignore_eos=True) for n in max_tokens])
    for prompt, n, out in zip(prompts, max_tokens, outputs):
        assert out["token_ids"] == hf_greedy(name, prompt, n), f"seed {seed}, {config}: prompt {prompt} differs"
    assert_clean(llm)
