"""Chapter 8: the KV pool in pages (sizes 1, 4, 256), admission with page-rounded reservations, integrity."""

from __future__ import annotations

import pytest
import torch

from helpers import MODEL_NAMES, assert_clean, hf_greedy, model_path, pending, prompt_ids
from minisgl.core import Batch, Req, SamplingParams
from minisgl.engine import Engine, EngineConfig
from minisgl.llm import LLM
from minisgl.scheduler.cache import CacheManager
from minisgl.scheduler.decode import DecodeManager
from minisgl.scheduler.prefill import PrefillAdder
from minisgl.scheduler.scheduler import Scheduler
from minisgl.scheduler.utils import PendingReq

CACHE_STUBS = ("CacheManager.allocate_paged", "CacheManager.free", "CacheManager.check_integrity")
ALL_STUBS = (*CACHE_STUBS, "PrefillAdder.try_add_one", "DecodeManager.reserved_slots")



def make_req(row: int, cached_len: int, device_len: int, max_tokens: int = 8) -> Req:
    req = Req(torch.arange(device_len, dtype=torch.int32), row, 0, max_tokens, row, SamplingParams(max_tokens=max_tokens))
    req.cached_len = cached_len
    return req



@pytest.mark.stubs("CacheManager.allocate_paged")
@pytest.mark.parametrize("two_copies", [False, True], ids=["cpu-table", "device-and-host-copies"])
def test_allocation_hands_out_whole_pages(two_copies):
    """With two_copies, the table stands for a GPU page table and host_table for the cache manager's own copy (on
    a CPU they are one tensor): every mapping goes into both."""
    table = torch.full((3, 16), -1, dtype=torch.int32)
    cache = CacheManager(num_pages=6, page_size=4, page_table=table)
    if two_copies:
        cache.host_table = table.clone()
    a, b = make_req(0, 0, 5), make_req(1, 0, 3)
    cache.allocate_paged([a, b])
    assert cache.available_size == (6 - 3) * 4, "5 tokens take 2 pages, 3 tokens take 1"
    for row, length in [(0, 8), (1, 4)]:
        slots = table[row, :length]
        pages = slots.view(-1, 4)
        got = slots.tolist()
        assert torch.equal(pages - pages[:, :1], torch.arange(4).expand_as(pages)), \
            f"row {row}: slots {got}: a page is 4 consecutive slots"
        assert (pages[:, 0] % 4 == 0).all(), f"row {row}: slots {got}: a page starts at a multiple of the page size"
        assert (table[row, length:] == -1).all(), \
            f"row {row}: {table[row].tolist()}: nothing beyond the {length} slots of the pages it needs"
    assert len(set(table[:2].flatten().tolist()) - {-1}) == 12, "no slot is handed out twice"
    a.cached_len, a.device_len = 5, 8  # positions 5..7 sit in the page it already has
    cache.allocate_paged([a])
    assert cache.available_size == 12, "no new page until a request crosses a page boundary"
    a.cached_len, a.device_len = 8, 9
    cache.allocate_paged([a])
    assert cache.available_size == 8
    before = table.clone()
    with pytest.raises(MemoryError):
        cache.allocate_paged([make_req(2, 0, 9), make_req(1, 4, 5)])  # 3 + 1 pages, only 2 free
    assert cache.available_size == 8 and torch.equal(table, before), "all or nothing"
    assert torch.equal(cache.host_table, table), "the host copy of the page table agrees with the table"


@pytest.mark.stubs("CacheManager.free")
def test_free_gives_pages_back_and_refuses_double_or_misaligned_frees():
    table = torch.zeros(2, 12, dtype=torch.int32)
    cache = CacheManager(num_pages=5, page_size=4, page_table=table)
    table[0, :8] = cache._page_slots(cache._allocate(2))  # a row holding two pages, as allocate_paged leaves it
    with pytest.raises(ValueError, match="do not start pages"):
        cache.free(table[0, 1:6])
    assert cache.available_size == 12, "a refused free frees nothing"
    cache.free(table[0, :6])  # two pages, the second one partly filled
    assert cache.available_size == 20
    with pytest.raises(ValueError, match="double free"):
        cache.free(table[0, :4])
    assert cache.available_size == 20


@pytest.mark.stubs("CacheManager.allocate_paged", "CacheManager.free", "CacheManager.check_integrity")
def test_integrity_check_catches_leaks_and_double_frees():
    table = torch.zeros(2, 8, dtype=torch.int32)
    cache = CacheManager(num_pages=4, page_size=2, page_table=table)
    cache.check_integrity()
    req = make_req(0, 0, 3)
    cache.allocate_paged([req])
    with pytest.raises(AssertionError, match="leaked: 2 of 4"):
        cache.check_integrity()
    cache.free(table[0, :4])
    cache.check_integrity()
    cache._free_pages.append(cache._free_pages[0])  # a bookkeeping bug elsewhere: one page listed twice
    with pytest.raises(AssertionError, match="double-freed"):
        cache.check_integrity()


@pytest.mark.stubs("DecodeManager.reserved_slots")
def test_running_requests_reserve_whole_pages():
    manager = DecodeManager(page_size=4)
    a = make_req(0, 6, 7, max_tokens=5)  # ends at 12: writes KV up to position 10 = 3 pages; holds 2 (0..5)
    b = make_req(1, 8, 9, max_tokens=1)
    b.max_device_len = 9  # generated its last token: writes nothing more, holds its 2 pages
    manager.add([a, b])
    assert manager.reserved_slots() == 4
    assert DecodeManager(page_size=1).reserved_slots() == 0


@pytest.mark.stubs("PrefillAdder.try_add_one", "CacheManager.allocate_paged")
def test_admission_counts_whole_pages():
    path = model_path("tiny-qwen3")
    eng = Engine(EngineConfig(path, max_running_reqs=3, max_seq_len=64, page_size=4, num_pages=10))
    sched = Scheduler(eng)  # owns the table and cache managers
    adder = PrefillAdder(token_budget=100, table=sched.table_manager, cache=sched.cache_manager, reserved=0)
    first = adder.try_add_one(pending(0, 4, 4))  # 7 positions -> 2 pages
    assert first is not None and adder.reserved == 8
    assert adder.try_add_one(pending(1, 30, 4)) is None, ("33 positions fit in 40 - 7 slots token by token, but "
                                                          "take 9 pages = 36 slots; 8 + 36 > 40")
    second = adder.try_add_one(pending(2, 21, 8))  # 28 positions: 7 pages over its life, 6 for its prompt
    assert second is not None and adder.reserved == 36
    assert adder.try_add_one(pending(3, 1, 1)) is not None, "one position, one page: 36 + 4 = 40 fits"
    assert adder.try_add_one(pending(4, 1, 1)) is None, "the table has 3 rows"
    batch = Batch(adder.reqs, "prefill")
    sched.prepare_batch(batch)
    assert sched.cache_manager.available_size == 40 - 4 * (1 + 6 + 1), "prefill takes the prompt's pages only"
    eng.forward_batch(batch)
    for r in adder.reqs:
        sched.cache_manager.cache_req(r, finished=True)
        sched.table_manager.free(r.table_idx)
    assert_clean(sched)


@pytest.mark.parametrize("page_size", [1, 4, 256])
@pytest.mark.parametrize("name", MODEL_NAMES)
@pytest.mark.stubs(*ALL_STUBS)
def test_generate_matches_hf_for_every_page_size(name, page_size):
    llm = LLM(model_path(name), max_running_reqs=4, max_seq_len=512, page_size=page_size)
    prompts = prompt_ids(name, 3)
    max_tokens = [6, 12, 9]
    outputs = llm.generate(prompts, [SamplingParams(max_tokens=n, ignore_eos=True) for n in max_tokens])
    for prompt, n, out in zip(prompts, max_tokens, outputs):
        assert out["token_ids"] == hf_greedy(name, prompt, n)
    assert_clean(llm)


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.stubs(*ALL_STUBS)
def test_nearly_full_pool_every_request_completes(page_size):
    name = "tiny-llama"
    prompts = prompt_ids(name, 4)
    n = 10
    biggest = max(len(p) for p in prompts) + n - 1
    pages = -(-biggest // page_size) + 1  # room for the biggest request and one spare page
    llm = LLM(model_path(name), max_running_reqs=4, max_seq_len=128, page_size=page_size, num_pages=pages)
    outputs = llm.generate(prompts, SamplingParams(max_tokens=n, ignore_eos=True))
    for prompt, out in zip(prompts, outputs):
        assert out["token_ids"] == hf_greedy(name, prompt, n)
    assert max(len(uids) for _, uids in llm.scheduler.history) == 1, "requests waited for each other"
    assert_clean(llm)


@pytest.mark.stubs(*ALL_STUBS)
def test_a_request_that_never_fits_is_refused_while_others_finish():
    name = "tiny-qwen3"
    engine = Engine(EngineConfig(model_path(name), max_running_reqs=2, max_seq_len=128, page_size=4, num_pages=8))
    scheduler = Scheduler(engine)
    prompts = prompt_ids(name, 2)
    for uid, prompt in enumerate(prompts):
        scheduler.add_request(PendingReq(uid, torch.tensor(prompt, dtype=torch.int32),
                                         SamplingParams(max_tokens=8, ignore_eos=True)))
    # 30 prompt + 3 more positions = 33 slots: 9 pages of 4, one more than the whole pool
    huge = PendingReq(9, torch.arange(1, 31, dtype=torch.int32), SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="needs 36 KV slots .* whole pool has 32"):
        scheduler.add_request(huge)
    scheduler.run_until_idle()
    for uid, prompt in enumerate(prompts):
        assert scheduler.finished[uid].output_ids == hf_greedy(name, prompt, 8)
    assert_clean(scheduler)


QUESTION_2_PROMPTS = (list(range(1, 5)), list(range(200, 230)))  # A: 4 tokens, B: 30 tokens, no shared prefix


def _run_question_2(count_tokens: bool) -> Scheduler:
    """Chapter 8's question 2 end to end: 10 pages of 4; A (prompt 4, max_tokens 4) and B (prompt 30, max_tokens 4)."""
    engine = Engine(EngineConfig(model_path("tiny-qwen3"), max_running_reqs=2, max_seq_len=64, page_size=4,
                                 num_pages=10))
    scheduler = Scheduler(engine)
    if count_tokens:  # admission as chapter 7 counted it: every need in tokens, not whole pages
        scheduler.cache_manager.slots_to_grow = lambda from_len, to_len: max(to_len - from_len, 0)
    for uid, prompt in enumerate(QUESTION_2_PROMPTS):
        scheduler.add_request(PendingReq(uid, torch.tensor(prompt, dtype=torch.int32),
                                         SamplingParams(max_tokens=4, ignore_eos=True)))
    scheduler.run_until_idle()
    return scheduler


@pytest.mark.stubs(*ALL_STUBS)
def test_token_counted_admission_runs_the_pool_dry_and_page_counted_does_not():
    # Token by token, A (7 positions) and B (33) need 40 of 40 slots, so both start at once. Their prompts take
    # 1 + 8 pages, A's first decode step takes the last one, and B's third step needs a 10th page while A runs.
    with pytest.raises(MemoryError, match="1 pages requested, 0"):
        _run_question_2(count_tokens=True)
    scheduler = _run_question_2(count_tokens=False)
    first_prefill_uids = next(uids for kind, uids in scheduler.history if kind == "prefill")
    assert first_prefill_uids == [0], f"whole pages (8 + 36 > 40) must hold B back until A ends: {scheduler.history}"
    for uid, prompt in enumerate(QUESTION_2_PROMPTS):
        assert scheduler.finished[uid].output_ids == hf_greedy("tiny-qwen3", prompt, 4), f"request {uid} differs from HF"
    assert_clean(scheduler)


def _pages_of(scheduler: Scheduler, req: Req) -> set[int]:
    """The pages a running request's page-table row points at for the positions it has cached."""
    ps = scheduler.cache_manager.page_size
    return {s // ps for s in scheduler.table_manager.page_table[req.table_idx, : req.cached_len].tolist()}


# The example's requests (prompts of 6 and 3 tokens, 4 tokens each) and a longer third one: with pages of 4,
# request 1 takes its second page alone (second decode step), request 0 its third in the next, and all three
# finish in that same step, where each must give back its own pages only.
SAME_STEP_PROMPTS = ([5, 6, 7, 8, 9, 10], [11, 12, 13], list(range(20, 33)))


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.stubs(*ALL_STUBS)
def test_requests_finishing_in_the_same_step_free_only_their_own_pages(page_size):
    name = "tiny-llama"
    engine = Engine(EngineConfig(model_path(name), max_running_reqs=3, max_seq_len=32, page_size=page_size,
                                 num_pages=-(-32 // page_size) * 2))
    scheduler = Scheduler(engine)
    for uid, prompt in enumerate(SAME_STEP_PROMPTS):
        scheduler.add_request(PendingReq(uid, torch.tensor(prompt, dtype=torch.int32),
                                         SamplingParams(max_tokens=4, ignore_eos=True)))
    cache = scheduler.cache_manager
    while (batch := scheduler.step()) is not None:
        step = f"after step {len(scheduler.history) - 1} ({batch.phase} of requests {[r.uid for r in batch.reqs]})"
        running = scheduler.decode_manager.running
        owner: dict[int, int] = {}
        for req in running:
            for page in _pages_of(scheduler, req):
                assert page not in owner, f"{step}: requests {owner[page]} and {req.uid} both hold page {page}"
                owner[page] = req.uid
        held = sum(-(-r.cached_len // page_size) for r in running)
        assert held + cache.available_size // page_size == cache.num_pages, (
            f"{step}: running requests hold {held} pages and {cache.available_size // page_size} are free, "
            f"but the pool has {cache.num_pages}")
    finished_together = scheduler.history[-1][1]
    assert sorted(finished_together) == [0, 1, 2], f"the fixture needs all three in the last step: {scheduler.history}"
    for uid, prompt in enumerate(SAME_STEP_PROMPTS):
        got, want = scheduler.finished[uid].output_ids, hf_greedy(name, prompt, 4)
        assert got == want, f"request {uid}: got {got}, HF {want}"
    assert_clean(scheduler)
