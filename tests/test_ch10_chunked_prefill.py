"""Chapter 10: chunked prefill (ChunkedReq, PrefillAdder._add_one_req / try_add_one, the token budget) and the
nano-vllm-style step simulator that shows why chunks bound decode stalls."""

from __future__ import annotations

import pytest
import torch

from helpers import assert_clean, hf_greedy, model_path, pending, tokenizer
from minisgl.core import SamplingParams
from minisgl.engine import Engine, EngineConfig
from minisgl.llm import LLM
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.prefill import ChunkedReq, PrefillAdder, PrefillManager
from minisgl.scheduler.scheduler import Scheduler
from minisgl.teaching.step_sim import Sequence, StepSimulator
from test_ch07_scheduler import InjectedFault, plant_fault

CHUNK_STUBS = ("ChunkedReq.append_host", "ChunkedReq.can_decode", "PrefillAdder._add_one_req",
               "PrefillAdder.try_add_one")
STEP_SIM_STUBS = ("Sequence.next_chunk", "StepSimulator.schedule")
LONG_TEXT = ("Paged attention stores the keys and values of every request in fixed-size blocks, so memory is "
             "allocated on demand and shared prefixes can be reused across requests without copying.")




@pytest.fixture
def engine():
    return Engine(EngineConfig(model_path("tiny-qwen3"), max_running_reqs=3, max_seq_len=96, num_pages=80))


@pytest.fixture
def sched(engine):
    """A scheduler over the engine: it owns the table and cache managers the adder tests work with."""
    return Scheduler(engine)


@pytest.mark.stubs("ChunkedReq.append_host")
def test_a_chunk_is_never_sampled():
    req = ChunkedReq(torch.arange(5, dtype=torch.int32), 0, 0, 4, 7, SamplingParams(max_tokens=4))
    with pytest.raises(RuntimeError) as refused:
        req.append_host(3)
    if isinstance(refused.value, NotImplementedError):  # a RuntimeError too: the stub itself, not a refusal
        raise refused.value
    assert req.input_ids.tolist() == [0, 1, 2, 3, 4], f"a refused token was recorded: {req.input_ids.tolist()}"


@pytest.mark.stubs("ChunkedReq.can_decode")
def test_a_chunk_never_decodes():
    req = ChunkedReq(torch.arange(5, dtype=torch.int32), 0, 0, 4, 7, SamplingParams(max_tokens=4))
    assert req.remain_len == 4, f"remain_len {req.remain_len}"
    assert not req.can_decode, "a chunk never decodes, whatever remains"


@pytest.mark.stubs("PrefillAdder._add_one_req", "ChunkedReq.can_decode")
def test_add_one_req_cuts_a_chunk_and_reserves_the_rest(sched):
    adder = PrefillAdder(token_budget=10, table=sched.table_manager, cache=sched.cache_manager, reserved=3)
    row = sched.table_manager.allocate()
    sched.table_manager.token_pool[row] = -1
    p = pending(0, 25, 6)
    req = adder._add_one_req(p, sched.cache_manager.match_req([])[0], row, 0)
    assert isinstance(req, ChunkedReq), f"10 of 25 tokens make a ChunkedReq, got {type(req).__name__}"
    assert (req.cached_len, req.device_len) == (0, 10), f"the chunk spans [{req.cached_len}, {req.device_len})"
    assert adder.token_budget == 0, f"the chunk takes the whole budget, {adder.token_budget} left"
    assert adder.reserved == 3 + 25 + 6 - 1, "the whole remaining prompt plus max_tokens (minus the last token)"
    assert sched.table_manager.token_pool[row, :10].tolist() == list(range(1, 11)), "the chunk's tokens are written"
    assert (sched.table_manager.token_pool[row, 10:] == -1).all(), "only this chunk's tokens are written"
    adder.token_budget = 100  # the next batch continues from position 10
    req.complete_one()
    last = adder._add_one_req(p, req.cache_handle, row, req.cached_len)
    assert type(last).__name__ == "Req" and (last.cached_len, last.device_len) == (10, 25)
    state = (adder.token_budget, adder.reserved)
    assert state == (85, 3 + 30 + 20), f"(budget, reserved) after the rest: {state}"
    assert last.can_decode and last.prompt_len == 25, "the last chunk is an ordinary request"
    sched.table_manager.free(row)


@pytest.mark.stubs("PrefillAdder.try_add_one", "PrefillAdder._add_one_req")
def test_try_add_one_continues_a_chunked_request_without_a_new_admission(sched):
    adder = PrefillAdder(token_budget=8, table=sched.table_manager, cache=sched.cache_manager, reserved=0)
    p = pending(0, 20, 4)
    first = adder.try_add_one(p)
    assert isinstance(first, ChunkedReq) and first.extend_len == 8, f"a budget of 8 cuts a chunk of 8: {first}"
    assert adder.try_add_one(pending(1, 2, 2)) is None, "an empty budget admits nothing"
    rows_left = sched.table_manager.available_size
    first.complete_one()
    p.chunked_req = first
    greedy = PrefillAdder(token_budget=8, table=sched.table_manager, cache=sched.cache_manager, reserved=10_000)
    second = greedy.try_add_one(p)  # no room for a new request, but this one was admitted already
    assert second is not None, "an admitted request continues even when a new one would not fit"
    spans = (second.table_idx, second.cached_len, second.device_len)
    assert spans == (first.table_idx, 8, 16), f"(row, cached, device) of the second chunk: {spans}"
    assert second.cache_handle is first.cache_handle, "the second chunk keeps the first one's cache handle"
    assert sched.table_manager.available_size == rows_left, "continuing takes no new row"
    assert greedy.try_add_one(pending(2, 2, 2)) is None, "a new request must still pass admission"
    sched.table_manager.free(first.table_idx)


# ------------------------------------------------------------ reservations in whole pages, caching only whole prompts

def whole_pages(n: int, page_size: int) -> int:
    """Slots of the pages that hold n tokens."""
    return -(-n // page_size) * page_size


@pytest.mark.stubs("PrefillAdder._add_one_req", "ChunkedReq.can_decode")
@pytest.mark.parametrize("page_size", [1, 4])
def test_a_chunk_reserves_whole_pages(page_size):
    eng = Engine(EngineConfig(model_path("tiny-qwen3"), max_running_reqs=3, max_seq_len=96, page_size=page_size,
                              num_pages=80 // page_size))
    sched = Scheduler(eng)  # owns the table and cache managers
    adder = PrefillAdder(token_budget=10, table=sched.table_manager, cache=sched.cache_manager, reserved=3)
    row = sched.table_manager.allocate()
    p = pending(0, 25, 6)  # 25 + 6 - 1 = 30 slots over its life
    chunk = adder._add_one_req(p, sched.cache_manager.match_req([])[0], row, 0)
    assert isinstance(chunk, ChunkedReq), f"10 of 25 tokens make a ChunkedReq, got {type(chunk).__name__}"
    want = 3 + whole_pages(30, page_size)
    assert adder.reserved == want, f"page_size {page_size}: reserved {adder.reserved}, want {want} (whole pages)"
    adder.token_budget = 100
    chunk.complete_one()
    adder._add_one_req(p, chunk.cache_handle, row, chunk.cached_len)  # the rest, from position 10
    want += whole_pages(30, page_size) - whole_pages(10, page_size)
    assert adder.reserved == want, f"page_size {page_size}: the rest from 10 reserved {adder.reserved}, want {want}"
    sched.table_manager.free(row)


@pytest.mark.stubs(*CHUNK_STUBS)
def test_admission_counts_whole_pages_so_the_pool_never_runs_dry():
    """Three requests of 13, 13 and 16 slots over their lives need 4 pages of 4 each: 12 pages, the pool has 11.
    Counted in tokens (13 + 13 + 16 = 42 <= 44 slots) all three would start and decode would run out of pages;
    counted in pages, the third waits until one finishes (admitted now, it would start as a 4-token chunk)."""
    eng = Engine(EngineConfig(model_path("tiny-qwen3"), max_running_reqs=3, max_seq_len=32, page_size=4,
                              num_pages=11))
    scheduler = Scheduler(eng, SchedulerConfig(max_extend_tokens=24))
    requests = [pending(0, 10, 4, first=5), pending(1, 10, 4, first=30), pending(2, 13, 4, first=60)]
    for r in requests:
        scheduler.add_request(r)
    scheduler.run_until_idle()  # a MemoryError here: more was admitted than the pool can hold
    for r in requests:
        ids = r.input_ids.tolist()
        want = hf_greedy("tiny-qwen3", ids, 4, stop_at_eos=True)
        assert scheduler.finished[r.uid].output_ids == want, f"request {r.uid} differs from HF greedy"
    assert_clean(scheduler)


@pytest.mark.stubs(*CHUNK_STUBS)
def test_a_prompt_enters_the_prefix_cache_only_after_its_last_chunk(engine):
    """A chunk's KV is not handed to the prefix cache: the prompt becomes shareable (its whole pages) once its
    last piece ran, as in mini-sglang."""
    scheduler = Scheduler(engine, SchedulerConfig(max_extend_tokens=8))
    request = pending(0, 30, 2)
    prompt = request.input_ids.tolist()
    scheduler.add_request(request)
    for step in range(3):  # chunks [0, 8), [8, 16), [16, 24)
        batch = scheduler.step()
        assert isinstance(batch.reqs[0], ChunkedReq), f"step {step} should run a chunk"
        cached = scheduler.cache_manager.match_req(prompt)[0].cached_len
        assert cached == 0, f"after chunk {step}, {cached} tokens of the unfinished prompt are in the prefix cache"
    batch = scheduler.step()  # the last piece, [24, 30)
    assert not isinstance(batch.reqs[0], ChunkedReq), "the fourth piece is the last one"
    cached = scheduler.cache_manager.match_req(prompt)[0].cached_len
    assert cached == len(prompt) - 1, f"the finished prompt is shareable up to its last token, got {cached}"
    scheduler.run_until_idle()
    assert_clean(scheduler)


@pytest.mark.stubs(*CHUNK_STUBS)
def test_unfinished_chunks_go_back_to_the_front(sched):
    manager = PrefillManager(sched.table_manager, sched.cache_manager, max_extend_tokens=12)
    for p in [pending(0, 5, 2), pending(1, 30, 2, first=40), pending(2, 3, 2, first=80)]:
        manager.add(p)
    batch = manager.schedule_next_batch(reserved=0)
    got = [(r.uid, r.extend_len, isinstance(r, ChunkedReq)) for r in batch.reqs]
    assert got == [(0, 5, False), (1, 7, True)], f"(uid, extend, chunked) of the first batch: {got}"
    assert [p.uid for p in manager.pending] == [1, 2], "the chunked request is first in line"
    for r in batch.reqs:
        r.complete_one()
    batch = manager.schedule_next_batch(reserved=0)
    got = [(r.uid, r.cached_len, r.extend_len) for r in batch.reqs]
    assert got == [(1, 7, 12)], f"(uid, cached, extend) of the second batch: {got}"
    for r in batch.reqs:
        r.complete_one()
    batch = manager.schedule_next_batch(reserved=0)
    assert [(r.uid, r.cached_len, r.extend_len, isinstance(r, ChunkedReq)) for r in batch.reqs] == [
        (1, 19, 11, False), (2, 0, 1, True)]
    for row in {0, 1, 2}:
        sched.table_manager.free(row)


def trace_run(page_size: int, budget: int = 16, **config):
    """The chapter's example on tiny-qwen3: a long prompt and two short ones with a small budget."""
    name = "tiny-qwen3"
    tok = tokenizer(name)
    prompts = [tok.encode(LONG_TEXT), tok.encode("Tea or coffee?"), tok.encode("Small steps")]
    llm = LLM(model_path(name), max_running_reqs=4, max_seq_len=256, page_size=page_size,
              max_extend_tokens=budget, **config)
    batches = []
    llm.scheduler.on_batch = lambda b: batches.append(
        (b.phase, [(r.uid, r.cached_len, r.device_len, isinstance(r, ChunkedReq)) for r in b.reqs]))
    outputs = llm.generate(prompts, SamplingParams(max_tokens=8, ignore_eos=True))
    return name, prompts, llm, batches, outputs


def check_trace(name, prompts, llm, batches, outputs, budget=16):
    assert len(prompts[0]) > 3 * budget, "the fixture needs a prompt several budgets long"
    prefills = [spans for phase, spans in batches if phase == "prefill"]
    sizes = [sum(d - c for _, c, d, _ in spans) for spans in prefills]
    assert all(size == budget for size in sizes[:-1]) and 0 < sizes[-1] <= budget, f"prefill batch sizes {sizes}"
    for uid, prompt in enumerate(prompts):
        ranges = sorted((c, d) for spans in prefills for u, c, d, _ in spans if u == uid)
        covered = [i for c, d in ranges for i in range(c, d)]
        assert covered == list(range(len(prompt))), f"request {uid}: every prompt token computed exactly once"
        chunked = [ch for spans in prefills for u, _, _, ch in spans if u == uid]
        assert chunked == [True] * (len(chunked) - 1) + [False], "chunks, then the last piece as a request"
    for prompt, out in zip(prompts, outputs):
        assert out["token_ids"] == hf_greedy(name, prompt, 8), f"prompt of {len(prompt)} tokens differs from HF greedy"
    assert_clean(llm)


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.stubs(*CHUNK_STUBS)
def test_budget_16_trace_matches_hf(page_size):
    check_trace(*trace_run(page_size))


@pytest.mark.stubs(*CHUNK_STUBS)
def test_prompt_longer_than_the_budget_with_a_cached_prefix():
    name = "tiny-llama"
    tok = tokenizer(name)
    base = tok.encode(LONG_TEXT)
    llm = LLM(model_path(name), max_running_reqs=2, max_seq_len=256, page_size=4, max_extend_tokens=8)
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    first = llm.generate([base[:30]], params)[0]
    spans = []
    llm.scheduler.on_batch = lambda b: spans.extend((r.cached_len, r.device_len) for r in b.reqs if b.is_prefill)
    second = llm.generate([base], params)[0]
    assert first["token_ids"] == hf_greedy(name, base[:30], 6), "the first prompt differs from HF greedy"
    assert second["token_ids"] == hf_greedy(name, base, 6), "the prompt over a cached prefix differs from HF greedy"
    assert spans[0][0] == 28, "chunking starts after the cached prefix (whole pages of the first prompt)"
    assert all(d - c <= 8 for c, d in spans), f"prefill spans {spans} exceed the budget of 8"
    assert_clean(llm)


@pytest.mark.stubs(*CHUNK_STUBS)
@pytest.mark.parametrize("where", ["forward", "sampler", "interrupt"])
@pytest.mark.parametrize("page_size", [1, 4])
def test_a_fault_in_the_middle_of_a_chunked_prompt_loses_nothing(where, page_size, monkeypatch):
    """The second forward pass (a chunk in the middle of the long prompt) fails: the chunk's pages go back, the
    request that holds a row and the pages of its earlier chunks is freed, and the same LLM matches HF after."""
    name = "tiny-qwen3"
    tok = tokenizer(name)
    prompts = [tok.encode("A cache of keys and values saves work when prompts share their beginnings, "
                          "so a scheduler that remembers them runs faster."), tok.encode("Short one.")]
    assert len(prompts[0]) > 3 * 8, "the fixture needs a prompt of several chunks"
    llm = LLM(model_path(name), max_running_reqs=2, max_seq_len=96, max_extend_tokens=8, page_size=page_size,
              num_pages=160 // page_size)
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    plant_fault(llm, where, 2, monkeypatch)
    with pytest.raises(KeyboardInterrupt if where == "interrupt" else InjectedFault):
        llm.generate(prompts, params)
    assert llm.scheduler.idle and not llm.scheduler.finished, "the failed call left requests behind"
    assert_clean(llm)
    monkeypatch.undo()
    outputs = llm.generate(prompts, params)
    assert [o["token_ids"] for o in outputs] == [hf_greedy(name, p, 4) for p in prompts], "the next call differs"
    assert_clean(llm)


@pytest.mark.stubs(*CHUNK_STUBS)
def test_aborting_a_chunked_request_frees_what_it_holds(engine):
    scheduler = Scheduler(engine, SchedulerConfig(max_extend_tokens=8))
    scheduler.add_request(pending(0, 30, 4))
    scheduler.add_request(pending(1, 4, 3, first=50))
    scheduler.step()
    scheduler.step()  # two chunks of request 0 ran: it holds a row and 16 slots
    assert scheduler.cache_manager.available_size < scheduler.cache_manager.num_slots, "the chunked request holds KV slots"
    assert scheduler.table_manager.available_size == 2, "the chunked request holds a row"
    assert scheduler.abort_request(0), "a chunked request can be aborted"
    assert not scheduler.abort_request(0), "gone already"
    scheduler.run_until_idle()
    assert list(scheduler.finished) == [1], f"finished {list(scheduler.finished)}: only the other request"
    assert scheduler.finished[1].output_ids == hf_greedy("tiny-qwen3", list(range(50, 54)), 3, stop_at_eos=True)
    assert_clean(scheduler)


@pytest.mark.stubs("Sequence.next_chunk")
def test_sequence_cursor_moves_chunk_by_chunk():
    seq = Sequence(0, prompt_len=10, max_tokens=1)
    assert [seq.next_chunk(4) for _ in range(3)] == [(0, 4), (4, 8), (8, 10)]
    assert not seq.is_prefilling and seq.next_chunk(4) == (10, 10)


@pytest.mark.stubs(*STEP_SIM_STUBS)
@pytest.mark.parametrize("chunk_size", [1, 5, 16, 1000])
def test_step_simulator_computes_every_token_once_and_bounds_decode_stalls(chunk_size):
    sched = StepSimulator(chunk_size)
    seqs = [Sequence(0, 3, 30), Sequence(1, 40, 5), Sequence(2, 17, 8), Sequence(3, 2, 1)]
    for s in seqs:
        sched.add(s)
    steps = sched.run()
    for s in seqs:
        chunks = [st.chunk for st in steps if st.chunk and st.chunk[0] == s.seq_id]
        assert [i for _, a, b in chunks for i in range(a, b)] == list(range(s.prompt_len)), "each token once"
        assert all(b - a <= chunk_size for _, a, b in chunks)
        decodes = [i for i, st in enumerate(steps) if s.seq_id in st.decode]
        last_chunk = max(i for i, st in enumerate(steps) if st.chunk and st.chunk[0] == s.seq_id)
        assert decodes == list(range(last_chunk + 1, last_chunk + s.max_tokens)), "a token every step, no stall"
        assert s.generated == s.max_tokens
    for st in steps:
        assert len(st.decode) <= 3 and st.num_tokens <= chunk_size + len(st.decode)
    assert max(st.num_tokens for st in steps) >= min(chunk_size, 40), "chunks use the budget"


@pytest.mark.stubs(*STEP_SIM_STUBS)
def test_without_chunks_one_step_carries_a_whole_prompt():
    bounded, unbounded = StepSimulator(8), StepSimulator(10_000)
    for sched in (bounded, unbounded):
        sched.add(Sequence(0, 4, 50))
        sched.schedule()
        sched.add(Sequence(1, 500, 2))
    assert max(s.num_tokens for s in bounded.run()) == 8 + 1
    assert max(s.num_tokens for s in unbounded.run()) == 500 + 1
