"""Chapter 23: optimistic admission and retraction. Running requests are counted at an estimate of what they will
still write (a new-token ratio that decays per step and rises after a retraction); when a decode step cannot get
its pages, running requests are retracted (their prefix kept in the radix cache), requeued at the front and
recomputed. Outputs stay HF greedy token for token and equal to a pool that never retracts, the pages and rows
are accounted for after every retraction, no request is retracted more than max_retractions times, and aborts of
retracted requests free everything."""

from __future__ import annotations

import collections
import os
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import httpx
import pytest
import torch

from helpers import (CHAT, TEXTS, assert_clean, health_until, hf_greedy, hold, model_path, token_rows,
                     tokenizer)
from minisgl.core import Batch, Req, SamplingParams
from minisgl.llm import LLM
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.decode import DecodeManager
from minisgl.scheduler.prefill import ChunkedReq
from minisgl.scheduler.retract import NewTokenRatio, pick_victim
from minisgl.scheduler.scheduler import Scheduler
from minisgl.scheduler.utils import PendingReq
from minisgl.server.local import LocalServer

ALL_STUBS = ("NewTokenRatio.after_retraction", "DecodeManager.reserved_slots", "pick_victim",
             "CacheManager.held_pages", "Admission.make_room", "Scheduler.retract")
RUN_STUBS = ("DecodeManager.reserved_slots", "pick_victim", "Admission.make_room", "Scheduler.retract",
             "NewTokenRatio.after_retraction")
NAME = "tiny-qwen3"
MAX_TOKENS = 24


class Bold(NewTokenRatio):
    """An estimate that never rises after a retraction: the worst case the guard must survive."""

    def after_retraction(self, running) -> None:
        pass


def make_req(uid: int, prompt: int, generated: int, max_tokens: int, host_generated: int | None = None) -> Req:
    """A running request: `prompt` tokens, `generated` of max_tokens generated (on the device; the host has
    host_generated of them, fewer while a batch is in flight), its KV cached up to its last token."""
    host = generated if host_generated is None else host_generated
    ids = torch.arange(1, prompt + host + 1, dtype=torch.int32)
    req = Req(ids, uid, prompt + host - 1, max_tokens - host, uid, SamplingParams(max_tokens=max_tokens))
    req.prompt_len = prompt
    for _ in range(generated - host):
        req.complete_one()  # a token computed on the device that the host has not seen yet
    return req


def prompts() -> list[list[int]]:
    tok = tokenizer(NAME)
    return [tok.encode(t) for t in TEXTS + CHAT]


def generate(pool: int, admission: str = "optimistic", overlap: bool = False, page_size: int = 1, name: str = NAME,
             ratio: NewTokenRatio | None = None, checks: bool = True, params=None, **kwargs):
    """The 8 prompts at once through a pool of `pool` slots. Returns (outputs, the LLM, {uid: tokens delivered},
    retracted uids in order). With `checks`, the scheduler's integrity is checked after every retraction and
    between steps, and at each retraction the victim's computed prefix must be in the radix cache."""
    ps = page_size
    llm = LLM(model_path(name), max_running_reqs=8, max_seq_len=64, page_size=ps, num_pages=pool // ps,
              overlap=overlap, admission=admission, new_token_ratio=ratio or NewTokenRatio(0.1, 0.1, 1), **kwargs)
    sched = llm.scheduler
    delivered, retracted = collections.Counter(), []

    def on_retract(req: Req) -> None:
        retracted.append(req.uid)
        if not checks:
            return
        sched.check_integrity()
        computed = min(req.cached_len, len(req.input_ids))  # KV exists for these (the host may lag, overlap)
        if sched.engine.config.cache_type == "radix":
            handle, _ = sched.cache_manager.prefix_cache.match_prefix(req.input_ids.tolist())
            assert handle.cached_len == computed - computed % ps, \
                f"request {req.uid}: {handle.cached_len} of its {computed} computed tokens are in the radix cache " \
                f"after its retraction, expected its whole pages ({computed - computed % ps})"
        assert sched.prefill_manager.pending[0].uid == req.uid or sched.prefill_manager.pending[0].chunked_req, \
            "a retracted request waits at the front of the queue"

    sched.on_retract = on_retract
    sched.on_token = lambda req, _: delivered.update([req.uid])
    ids = prompts()
    params = params or SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    if checks:
        outputs = llm.generate(ids, params) if not overlap else _generate_checked(llm, ids, params)
    else:
        outputs = llm.generate(ids, params)
    assert_clean(llm)
    return [o["token_ids"] for o in outputs], llm, delivered, retracted


def _generate_checked(llm: LLM, ids, params):
    """llm.generate with the integrity checked between steps too (the scheduler's on_step hook)."""
    sched = llm.scheduler
    uids = list(range(llm._next_uid, llm._next_uid + len(ids)))
    for uid, prompt in zip(uids, ids):
        sched.add_request(PendingReq(uid, torch.tensor(prompt, dtype=torch.int32), params))
    llm._next_uid += len(ids)
    sched.run_until_idle(sched.check_integrity)
    return [{"token_ids": sched.finished.pop(uid).output_ids} for uid in uids]


@lru_cache(maxsize=None)
def never_retracts(page_size: int, name: str = NAME) -> tuple[tuple[int, ...], ...]:
    """The outputs through a pool large enough for all 8 requests at their full max_tokens: no retraction."""
    outputs, llm, _, retracted = generate(8 * 64, admission="conservative", page_size=page_size, name=name)
    assert not retracted and llm.scheduler.admission.num_retractions == 0
    return tuple(map(tuple, outputs))


def check_hf(outputs, name: str = NAME, n: int = MAX_TOKENS) -> None:
    for uid, (prompt, out) in enumerate(zip(prompts(), outputs)):
        want = hf_greedy(name, prompt, n)
        assert list(out) == want, f"request {uid} differs from HF greedy from token " \
                                  f"{next((i for i, (a, b) in enumerate(zip(out, want)) if a != b), len(out))}"


# --------------------------------------------------------------------------------------------- the pieces


@pytest.mark.stubs("NewTokenRatio.after_retraction")
def test_the_ratio_starts_high_decays_per_step_and_rises_after_a_retraction():
    ratio = NewTokenRatio(init=0.7, min_ratio=0.1, decay_steps=6)
    assert ratio.current == 0.7
    for _ in range(3):
        ratio.step()
    assert ratio.current == pytest.approx(0.4), "each step takes (init - min) / decay_steps off"
    for _ in range(10):
        ratio.step()
    assert ratio.current == pytest.approx(0.1), "never below min_ratio"
    # Two requests generated 50 and 70 of 100 tokens: (120 + 2 x 20) / (200 + 1) of their budget is what to expect.
    ratio.after_retraction([make_req(0, 10, 50, 100), make_req(1, 5, 70, 100)])
    assert ratio.current == pytest.approx(160 / 201), f"the observed share (120 + 40) / 201, got {ratio.current}"
    ratio.current = 0.1
    ratio.after_retraction([make_req(0, 10, 5, 1000), make_req(1, 5, 5, 1000)])
    assert ratio.current == pytest.approx(0.7), \
        f"a retraction never lowers the estimate below init (observed 50 / 2001), got {ratio.current}"
    ratio.after_retraction([make_req(0, 10, 90, 100)])
    assert ratio.current == 1.0, f"(90 + 20) / 101 is more than everything: capped at 1, got {ratio.current}"
    # generated is counted on the device: a token in flight (overlap) counts, the host copy lags
    ratio.current = 0.1
    ratio.after_retraction([make_req(0, 10, 90, 100, host_generated=89)])
    assert ratio.current == 1.0
    ratio.after_retraction([make_req(0, 30, 80, 100, host_generated=60)])
    assert ratio.current == pytest.approx(100 / 101), "80 generated on the device, whatever the host holds"
    ratio.reset()
    assert ratio.current == 0.7
    assert NewTokenRatio().min == pytest.approx(0.7 * 0.14), "SGLang's default floor: 0.14 x init"


@pytest.mark.parametrize("args, match", [((0.0,), "init"), ((1.5,), "init"), ((0.5, 0.6), "min_ratio"),
                                         ((0.5, 0.1, 0), "decay_steps"), ((True,), "init")])
def test_a_bad_ratio_is_a_value_error(args, match):
    with pytest.raises(ValueError, match=match):
        NewTokenRatio(*args)


@pytest.mark.stubs("DecodeManager.reserved_slots")
def test_running_requests_reserve_a_share_of_what_they_may_still_write():
    manager = DecodeManager(page_size=1)
    req = make_req(0, 10, 1, 21)  # KV up to position 29 still to write: 20 positions from cached_len 10
    manager.add([req])
    assert manager.reserved_slots() == 20, "conservative: all it may still write"
    assert manager.reserved_slots(0.5) == 10
    assert manager.reserved_slots(0.25) == 5
    assert manager.reserved_slots(0.01) == 1, "a share is rounded up: its next token is always expected"
    assert manager.reserved_slots(0.5, pinned={0}) == 20, "a pinned request keeps its whole reservation"
    assert manager.reserved_slots(0.5, pinned={7}) == 10
    manager.running = [make_req(0, 10, 11, 21)]  # 11 of 21 generated: 10 positions left
    assert manager.reserved_slots(0.5) == 5, "the share is of what it may still write, not of max_tokens"
    manager.running = [make_req(0, 10, 1, 21)]
    assert manager.reserved_slots(0.1 + 0.2) == 6, \
        "a ratio of 0.3 from float arithmetic (0.30000000000000004) x 20 positions is 6, not 7"
    done = make_req(1, 10, 21, 21)  # its last token is in flight: nothing more to write
    manager.running = [done]
    assert manager.reserved_slots(0.5) == 0 and manager.reserved_slots() == 0
    paged = DecodeManager(page_size=4)
    paged.add([make_req(0, 10, 1, 21)])  # holds positions 0-9: pages 0-2 (12 slots)
    assert paged.reserved_slots(0.5) == 8, "up to position 20: 5 pages, 2 more than it holds"
    assert paged.reserved_slots(0.01) == 0, "its next position (10) is in a page it holds"
    assert paged.reserved_slots() == 20, "up to position 29: 8 pages, 5 more"


@pytest.mark.stubs("pick_victim")
def test_the_victim_is_the_least_advanced_or_the_last_admitted_and_never_a_pinned_one():
    a, b, c, d = make_req(0, 10, 5, 40), make_req(1, 30, 2, 40), make_req(2, 20, 2, 40), make_req(3, 30, 2, 40)
    reqs = [a, b, c, d]  # in admission order
    assert pick_victim(reqs, "length") is d, "fewest generated (2), then the longest prompt (30), then the latest"
    assert pick_victim(reqs, "length", pinned={3}) is b
    assert pick_victim(reqs, "length", pinned={1, 3}) is c
    assert pick_victim([a, c], "length") is c
    assert pick_victim(reqs, "length", pinned={0, 1, 2, 3}) is None, "every request pinned: nobody to retract"
    assert pick_victim(reqs, "last") is d
    assert pick_victim(reqs, "last", pinned={3}) is c
    assert pick_victim([d, c, b, a], "last") is a, "the last admitted, whatever it has generated"
    # generated is counted on the device: x's host copy lags two tokens behind (a batch in flight)
    x, y = make_req(4, 30, 3, 40, host_generated=1), make_req(5, 20, 2, 40)
    assert pick_victim([x, y], "length") is y, "x generated 3 tokens (2 still on their way to the host), y 2"
    with pytest.raises(ValueError, match="policy"):
        pick_victim(reqs, "first")


@pytest.mark.stubs("CacheManager.held_pages")
@pytest.mark.parametrize("page_size", [1, 4])
def test_the_integrity_check_accounts_for_the_pages_of_running_requests(page_size):
    llm = LLM(model_path(NAME), max_running_reqs=3, max_seq_len=64, page_size=page_size, num_pages=96 // page_size,
              overlap=False)
    sched = llm.scheduler
    ids = prompts()[0] * 2  # 20 tokens
    llm.generate([ids[:12]], SamplingParams(max_tokens=3, ignore_eos=True))  # its pages stay in the radix cache
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    for uid, prompt in ((10, ids), (11, prompts()[2])):
        sched.add_request(PendingReq(uid, torch.tensor(prompt, dtype=torch.int32), params))
    sched.step()  # both prefilled; request 10 started from the cached prefix
    sched.step()  # one decode step
    live = {r.uid: r for r in sched.decode_manager.running}
    assert live[10].cache_handle.cached_len >= 12 - 12 % page_size - page_size, "the fixture needs a cached prefix"
    sched.check_integrity()  # passes while they run
    cache = sched.cache_manager
    for uid, req in live.items():
        start = req.cache_handle.cached_len if req.cache_handle is not None else 0
        end = -(-req.cached_len // page_size) * page_size
        want = [s // page_size for s in cache.host_table[req.table_idx, start:end:page_size].tolist()]
        got = cache.held_pages([req])
        assert got == want, f"request {uid} holds the pages of positions {start}-{end - 1} of its row: {want}, got {got}"
    page = cache.held_pages([live[11]])[-1]
    cache._free_pages.append(page)  # a held page on the free list too
    with pytest.raises(AssertionError, match="also free"):
        sched.check_integrity()
    cache._free_pages.pop()
    del sched._live[11]  # a live request the scheduler lost track of: its pages leak
    with pytest.raises(AssertionError, match="leaked"):
        sched.check_integrity()
    sched._live[11] = live[11]
    sched.run_until_idle()
    assert_clean(llm)


def three_running(**kwargs):
    """An engine with requests 0-2 decoding (4 tokens each, prompts of 10, 10 and 19 tokens; their 156 slots of
    full need fit in the 200 of the pool) and request 9 waiting (its 55 do not fit yet). Admission is conservative:
    the pool is emptied by hand where a test needs it to run dry."""
    llm = LLM(model_path(NAME), max_running_reqs=4, max_seq_len=64, page_size=1, num_pages=200, overlap=False,
              **kwargs)
    sched = llm.scheduler
    params = SamplingParams(max_tokens=40, ignore_eos=True)
    ps = prompts()
    for uid in range(3):
        sched.add_request(PendingReq(uid, torch.tensor(ps[uid], dtype=torch.int32), params))
    for _ in range(4):
        sched.step()  # a prefill batch of the three, then three decode steps
    running = list(sched.decode_manager.running)
    assert [len(r.output_ids) for r in running] == [4, 4, 4], "the fixture: three requests with 4 tokens each"
    sched.add_request(PendingReq(9, torch.tensor(ps[3], dtype=torch.int32), params))  # a newcomer waits
    return llm, running


def finish_and_check(llm) -> None:
    sched, ps = llm.scheduler, prompts()
    sched.run_until_idle()
    for uid in (0, 1, 2, 9):
        prompt = ps[3] if uid == 9 else ps[uid]
        assert sched.finished.pop(uid).output_ids == hf_greedy(NAME, prompt, 40), f"request {uid} differs from HF"
    assert_clean(llm)


@pytest.mark.stubs("Scheduler.retract")
@pytest.mark.parametrize("limit", [1, 2])
def test_a_retracted_request_waits_at_the_front_with_its_tokens_and_its_prefix_cached(limit):
    llm, running = three_running(max_retractions=limit)
    sched, cache = llm.scheduler, llm.scheduler.cache_manager
    victim = running[1]
    free_before = cache.available_size
    sched.retract(victim)
    assert victim not in sched.decode_manager.running and 1 not in sched._live, "the victim left the running set"
    waiting = list(sched.prefill_manager.pending)
    assert [p.uid for p in waiting] == [1, 9], "the victim waits at the front, before the newcomer"
    assert waiting[0].input_ids.tolist() == victim.input_ids.tolist() and waiting[0].prompt_len == 10, \
        "it waits with its prompt and the 4 tokens it generated, and remembers where its prompt ends"
    assert waiting[0].output_len == 36, "4 of its 40 tokens are generated: 36 to go"
    handle, _ = cache.prefix_cache.match_prefix(victim.input_ids.tolist())
    assert handle.cached_len == 13, f"its 13 computed tokens are kept in the radix cache, found {handle.cached_len}"
    assert cache.available_size == free_before + 13, "its pages are room again (unlocked in the cache)"
    admission = sched.admission
    assert admission.num_retractions == 1 and admission.retractions == {1: 1}, f"counted: {admission.retractions}"
    assert sched.admission.pinned == ({1} if limit == 1 else set()), \
        f"pinned once retracted max_retractions={limit} times: {sched.admission.pinned}"
    sched.check_integrity()
    finish_and_check(llm)
    assert not admission.retractions and not admission.pinned, "nothing is kept of a request once it finished"


@pytest.mark.stubs("Admission.make_room", "NewTokenRatio.after_retraction")
def test_make_room_retracts_until_the_step_fits_and_keeps_the_last_row():
    llm, running = three_running(new_token_ratio=NewTokenRatio(0.5, 0.1, 4))
    sched, cache = llm.scheduler, llm.scheduler.cache_manager
    batch = sched.decode_manager.schedule_next_batch()
    hog = cache._allocate(len(cache._free_pages) - 1)  # all but one free page taken elsewhere; nothing evictable
    assert cache.available_size == 1
    kept = sched.admission.make_room(batch)
    assert kept is not None and kept.reqs == running[:2], \
        f"3 slots needed, 1 free: one retraction frees enough, kept {kept and [r.uid for r in kept.reqs]}"
    assert sched.admission.num_retractions == 1 and [p.uid for p in sched.prefill_manager.pending] == [2, 9], \
        "the victim (the least advanced: all have 4 tokens; then the longest prompt: request 2) was retracted"
    assert sched.admission.new_token_ratio.current == pytest.approx((8 + 40) / 81), \
        f"after the retraction: (8 generated + 2 x 20) / (80 + 1), got {sched.admission.new_token_ratio.current}"

    # Free pages short, but the radix cache holds unlocked pages (the victim's): they count, nobody is retracted.
    more = cache._allocate(len(cache._free_pages))
    assert len(cache._free_pages) == 0 and cache.available_size == 22
    before = sched.admission.new_token_ratio.current
    again = sched.admission.make_room(kept)
    assert sched.admission.num_retractions == 1 and again.reqs == kept.reqs, \
        "evictable cached pages are room too: a step that fits retracts nobody"
    assert sched.admission.new_token_ratio.current == pytest.approx(before - 0.1), \
        "a step that fits decays the ratio once"
    cache.free(cache._page_slots(more))

    # One row left and no room at all: it is never retracted (it would only be admitted again into the same room).
    rest = cache._allocate(cache.available_size)
    single = Batch([kept.reqs[0]], "decode")
    result = sched.admission.make_room(single)
    assert result is not None and result.reqs == single.reqs and sched.admission.num_retractions == 1, \
        "the last row stays"
    # The same row while a prompt's chunk needs 1 slot in the same step (a mixed batch): the step has the chunk to
    # run, so the last row goes too.
    gone = sched.admission.make_room(single, extra=1)
    assert gone is None and sched.admission.num_retractions == 2, \
        f"with extra=1 (a chunk shares the step) the last row is retracted, kept {gone and [r.uid for r in gone.reqs]}"
    cache.free(cache._page_slots(rest + hog))
    finish_and_check(llm)


# ------------------------------------------------------------------------------------------- the whole loop

TIGHT = 100  # slots: the 8 requests (prompts of 7-19 tokens, 24 tokens each) need up to 288 at once


@pytest.mark.stubs(*ALL_STUBS)
@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
def test_outputs_with_retraction_equal_a_pool_that_never_retracts_and_hf(overlap, page_size):
    outputs, llm, delivered, retracted = generate(TIGHT, overlap=overlap, page_size=page_size)
    assert retracted, "the fixture must retract: the pool holds 2 requests at their full max_tokens"
    assert list(map(tuple, outputs)) == list(never_retracts(page_size)), \
        "outputs differ from a pool large enough never to retract"
    check_hf(outputs)
    assert [delivered[uid] for uid in range(8)] == [len(o) for o in outputs], \
        "every token reaches the caller exactly once: none dropped, none sent again after a retraction"
    sched = llm.scheduler
    assert not sched.admission.retractions and not sched.admission.pinned and not sched.prefill_manager.pending, \
        "nothing is kept of retracted requests once they finished"
    assert max(collections.Counter(retracted).values()) <= sched.config.max_retractions


@pytest.mark.stubs(*RUN_STUBS)
@pytest.mark.parametrize("policy", ["length", "last"])
def test_both_retraction_policies_and_a_cache_without_sharing_match_hf(policy):
    outputs, llm, _, retracted = generate(TIGHT, name="tiny-llama", page_size=4, retraction_policy=policy,
                                          cache_type="naive")
    assert retracted, "the fixture must retract"
    assert list(map(tuple, outputs)) == list(never_retracts(4, "tiny-llama"))
    check_hf(outputs, "tiny-llama")


@pytest.mark.stubs(*RUN_STUBS)
def test_seeded_sampling_draws_the_same_tokens_after_a_retraction():
    params = [SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, temperature=1.0, seed=100 + i) for i in range(8)]
    tight, _, _, retracted = generate(TIGHT, params=params)
    roomy, _, _, _ = generate(8 * 64, admission="conservative", params=params)
    assert retracted, "the fixture must retract"
    assert tight == roomy, "a seeded request draws from (seed, position): recomputing it changes nothing"


@pytest.mark.stubs(*RUN_STUBS)
@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
def test_aborting_retracted_requests_frees_everything(overlap):
    llm = LLM(model_path(NAME), max_running_reqs=8, max_seq_len=64, page_size=1, num_pages=TIGHT, overlap=overlap,
              admission="optimistic", new_token_ratio=NewTokenRatio(0.1, 0.1, 1))
    sched = llm.scheduler
    ps = prompts()
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    for uid, prompt in enumerate(ps):
        sched.add_request(PendingReq(uid, torch.tensor(prompt, dtype=torch.int32), params))
    retracted, aborted, readmitted = [], [], []
    sched.on_retract = lambda req: retracted.append(req.uid)
    sched.on_batch = lambda b: readmitted.extend(r.uid for r in b.prefill_reqs if r.uid in retracted)

    def on_step() -> None:
        sched.check_integrity()
        if retracted and not aborted:  # the first victim, while it waits to be admitted again
            uid = retracted[0]
            assert any(p.uid == uid for p in sched.prefill_manager.pending), "a victim waits in the queue"
            assert sched.abort_request(uid), "a retracted request can be aborted while it waits"
            aborted.append(uid)
            assert uid not in sched.admission.retractions and uid not in sched.admission.pinned, \
                "an aborted request is forgotten"
        elif len(readmitted) > 0 and len(aborted) == 1 and readmitted[-1] not in aborted:
            uid = readmitted[-1]  # a victim admitted again (pinned), now running
            assert sched.abort_request(uid), "a retracted request can be aborted once it runs again"
            aborted.append(uid)
        sched.check_integrity()

    sched.run_until_idle(on_step)
    assert len(aborted) == 2, f"the fixture must abort a waiting and a readmitted victim, aborted {aborted}"
    assert not sched.abort_request(aborted[0]), "aborting it twice is no error, and finds nothing"
    for uid, prompt in enumerate(ps):
        if uid in aborted:
            assert uid not in sched.finished
            continue
        assert sched.finished.pop(uid).output_ids == hf_greedy(NAME, prompt, MAX_TOKENS), f"request {uid} differs"
    assert_clean(llm)


@pytest.mark.stubs("pick_victim", "Scheduler.retract", "Admission.make_room")
@pytest.mark.parametrize("limit, victims", [(10**6, [1, 1, 1, 1]), (1, [1, 0, None, None]), (2, [1, 1, 0, 0])])
def test_no_request_is_retracted_more_than_max_retractions_times(limit, victims):
    """The pool runs dry four times. Nothing else bounds how often one request pays: by the "last" rule the request
    admitted again after a retraction is again the last admitted, and is retracted again. Once retracted
    max_retractions times it is pinned (never chosen again); when every running request is pinned, nobody is."""
    llm = LLM(model_path(NAME), max_running_reqs=2, max_seq_len=64, page_size=1, num_pages=120, overlap=False,
              retraction_policy="last", max_retractions=limit)  # conservative: the pool is emptied by hand
    sched, cache = llm.scheduler, llm.scheduler.cache_manager
    ps = prompts()
    for uid in (0, 1):
        sched.add_request(PendingReq(uid, torch.tensor(ps[uid], dtype=torch.int32),
                                     SamplingParams(max_tokens=30, ignore_eos=True)))
    got = []
    for _ in range(4):
        while len(sched.decode_manager.running) < 2 or sched.prefill_manager.pending:
            sched.step()  # the victim of the last round is admitted again
        batch = sched.decode_manager.schedule_next_batch()
        hog = cache._allocate(cache.available_size)  # the pool runs dry: no free page, nothing evictable
        before = sched.admission.num_retractions
        kept = sched.admission.make_room(batch)
        gone = [r.uid for r in batch.reqs if r not in kept.reqs]
        assert sched.admission.num_retractions - before == len(gone) <= 1, "one retraction is enough each time"
        got.append(gone[0] if gone else None)
        cache.free(cache._page_slots(hog))
        sched.check_integrity()
    assert got == victims, f"victims of the four rounds with max_retractions={limit}: {got}, expected {victims}"
    counts = collections.Counter(u for u in got if u is not None)
    assert max(counts.values()) <= limit
    sched.run_until_idle()
    for uid in (0, 1):
        assert sched.finished.pop(uid).output_ids == hf_greedy(NAME, ps[uid], 30), f"request {uid} differs from HF"
    assert_clean(llm)


@pytest.mark.stubs(*RUN_STUBS)
def test_mixed_batches_with_a_chunked_prompt_and_optimistic_admission():
    """A long prompt arrives and runs in chunks of 2 tokens (a budget of 5, 3 decode rows) while three requests
    decode in the same batches, growing past their estimates: the pool runs dry while the prompt is part-way
    through. Its pages count when the scheduler makes room, and it keeps its place at the front of the queue."""
    tok = tokenizer(NAME)
    long = tok.encode(" ".join(TEXTS))  # 56 tokens
    llm = LLM(model_path(NAME), max_running_reqs=4, max_seq_len=96, page_size=1, num_pages=125, overlap=False,
              max_extend_tokens=5, enable_mixed_chunk=True, admission="optimistic",
              new_token_ratio=NewTokenRatio(0.1, 0.1, 1))
    sched = llm.scheduler
    ps = prompts()[:3]
    for uid, prompt in enumerate(ps):
        sched.add_request(PendingReq(uid, torch.tensor(prompt, dtype=torch.int32),
                                     SamplingParams(max_tokens=40, ignore_eos=True)))
    chunks, during = [], []

    def on_retract(req: Req) -> None:
        sched.check_integrity()
        pending = list(sched.prefill_manager.pending)
        chunked = [i for i, p in enumerate(pending) if p.chunked_req is not None]
        if chunked:
            during.append(req.uid)
            assert chunked == [0] and pending[1].uid == req.uid, \
                "the prompt part-way through its chunks stays first; the victim waits right behind it"

    sched.on_batch = lambda b: chunks.extend(r.uid for r in b.prefill_reqs if isinstance(r, ChunkedReq))
    sched.on_retract = on_retract

    def arrive() -> None:
        if len(sched.history) == 2:
            sched.add_request(PendingReq(3, torch.tensor(long, dtype=torch.int32),
                                         SamplingParams(max_tokens=8, ignore_eos=True)))

    sched.run_until_idle(arrive)
    assert chunks.count(3) >= 10, "the long prompt ran in chunks"
    assert during, "the fixture must retract while the long prompt is part-way through its chunks"
    for uid, prompt in enumerate(ps + [long]):
        n = 8 if uid == 3 else 40
        assert sched.finished.pop(uid).output_ids == hf_greedy(NAME, prompt, n), f"request {uid} differs from HF"
    assert_clean(llm)


class Bursts:
    """The scheduler process's inbox, in-process: bursts of requests, each sent only once the scheduler has gone
    idle and its loop has polled the empty inbox once and stepped with nothing to do, as a server's loop does
    between two bursts of traffic (it wakes from its blocking receive empty-handed). Then an ExitMsg. No timing:
    what the loop sees depends on the scheduler's state only."""

    def __init__(self, scheduler: Scheduler, bursts: list[list]) -> None:
        self.scheduler, self.bursts, self.items = scheduler, list(bursts), []
        self.idle_polls = 0  # empty polls in a row while nothing waits or runs
        self.starts: list[tuple[int, float]] = []  # (batches run so far, ratio) when each burst is sent

    def get(self, timeout=None):
        from minisgl.message import ExitMsg

        if self.items:
            return self.items.pop(0)
        if not self.scheduler.idle:
            self.idle_polls = 0
            return None
        self.idle_polls += 1
        if self.idle_polls < 2:  # the first empty poll: the loop goes on and steps idle
            return None
        self.idle_polls = -1  # the messages just sent are not processed yet: the next empty poll is not idle time
        if not self.bursts:
            return ExitMsg()
        self.items = self.bursts.pop(0)
        self.starts.append((len(self.scheduler.history), self.scheduler.admission.new_token_ratio.current))
        return self.items.pop(0)


class Sent:
    def __init__(self) -> None:
        self.sent: list = []

    def put(self, msg) -> None:
        self.sent.extend(getattr(msg, "data", [msg]))


@pytest.mark.stubs(*RUN_STUBS)
@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
def test_the_next_burst_after_an_idle_scheduler_is_admitted_as_the_first(overlap):
    """A server's scheduler (SchedulerIO, in-process) gets the 8 requests, answers them, goes idle, then gets the
    same 8 again. The first burst moves the new-token ratio (it decays at every step that fits, rises after a
    retraction); idle, the scheduler puts it back to its start, so the second burst is admitted batch for batch as
    the first. Offline LLM.generate never goes idle between requests: only the serving loop shows this. The naive
    cache shares nothing, so the second burst finds no prefix of the first and must run the same schedule."""
    from minisgl.engine import Engine, EngineConfig
    from minisgl.message import UserMsg
    from minisgl.scheduler.io import SchedulerIO

    engine = Engine(EngineConfig(model_path(NAME), max_running_reqs=8, max_seq_len=64, page_size=1, num_pages=160,
                                 cache_type="naive"))
    ratio = NewTokenRatio(0.7, 0.1, 4)  # reaches its floor after 4 steps that fit
    sched = Scheduler(engine, SchedulerConfig(max_extend_tokens=32, overlap=overlap, admission="optimistic",
                                              new_token_ratio=ratio))
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    ps = prompts()
    bursts = [[UserMsg(base + i, torch.tensor(p, dtype=torch.int32), params) for i, p in enumerate(ps)]
              for base in (0, 100)]
    inbox, outbox = Bursts(sched, bursts), Sent()
    SchedulerIO(sched, inbox, outbox).run_forever(alive=lambda: True)
    assert len(inbox.starts) == 2, f"both bursts were sent: {inbox.starts}"
    (first, _), (second, ratio_then) = inbox.starts
    runs = [[(phase, [uid % 100 for uid in uids]) for phase, uids in sched.history[a:b]]
            for a, b in ((first, second), (second, len(sched.history)))]
    assert sched.admission.num_retractions > 0, "the fixture must retract: the first burst has to move the ratio"
    diverge = next((i for i, (a, b) in enumerate(zip(*runs)) if a != b), min(map(len, runs)))
    assert runs[0] == runs[1], (
        f"the second burst was admitted differently from the first from its batch {diverge} on "
        f"(first: {runs[0][diverge:diverge + 2]}, second: {runs[1][diverge:diverge + 2]}): the new-token ratio was "
        f"{ratio_then:.3f} when it arrived, the first burst found {ratio.init}; an idle scheduler must reset it")
    tokens = collections.defaultdict(list)
    for row in token_rows(outbox.sent):
        tokens[row.uid].append(row.next_token)
    for i, p in enumerate(ps):
        want = hf_greedy(NAME, p, MAX_TOKENS)
        assert tokens[i] == want and tokens[100 + i] == want, f"request {i} differs from HF greedy in a burst"
    assert_clean(sched)


# ------------------------------------------------------------------------------------ defaults, settings


def test_conservative_admission_is_the_default_and_never_retracts():
    outputs, llm, _, retracted = generate(TIGHT, admission=None)
    assert llm.scheduler.config.admission == "conservative" and not llm.scheduler.config.optimistic
    assert not retracted and llm.scheduler.admission.num_retractions == 0
    check_hf(outputs)


@pytest.mark.stubs("DecodeManager.reserved_slots")
def test_optimistic_admission_runs_more_requests_at_once():
    """Answers that end early (here: each request is stopped after its natural length, as a stop string stops it in
    the server): conservative admission reserves all of max_tokens for each; optimistic admission does not."""
    widest = {}
    for admission in ("conservative", "optimistic"):
        llm = LLM(model_path(NAME), max_running_reqs=8, max_seq_len=64, page_size=1, num_pages=160, overlap=False,
                  admission=admission, new_token_ratio=NewTokenRatio(0.3, 0.3, 1))
        sched = llm.scheduler
        lengths = {uid: 4 + 2 * uid for uid in range(8)}
        got, stop, sizes = collections.Counter(), [], []
        sched.on_batch = lambda b: sizes.append(len(b.decode_reqs))

        def on_token(req, _):
            got.update([req.uid])
            if got[req.uid] == lengths[req.uid]:
                stop.append(req.uid)

        sched.on_token = on_token
        for uid, prompt in enumerate(prompts()):
            sched.add_request(PendingReq(uid, torch.tensor(prompt, dtype=torch.int32),
                                         SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)))
        sched.run_until_idle(lambda: [sched.abort_request(stop.pop()) for _ in list(stop)])
        assert all(got[u] == lengths[u] for u in range(8))
        widest[admission] = (max(sizes), len(sched.history))
        assert_clean(llm)
    assert widest["optimistic"][0] > widest["conservative"][0], f"(widest decode batch, batches): {widest}"
    assert widest["optimistic"][1] < widest["conservative"][1], f"(widest decode batch, batches): {widest}"


@pytest.mark.parametrize("kwargs, match", [
    (dict(admission="bold"), "admission"), (dict(retraction_policy="first"), "retraction_policy"),
    (dict(max_retractions=0), "max_retractions"), (dict(max_retractions=True), "max_retractions"),
    (dict(new_token_ratio=0.5), "new_token_ratio")])
def test_bad_admission_settings_are_refused_before_an_engine_is_built(monkeypatch, kwargs, match):
    import minisgl.llm.llm as llm_module

    def no_engine(*args, **kw):
        raise AssertionError("an engine was built before the settings were checked")

    monkeypatch.setattr(llm_module, "Engine", no_engine)
    with pytest.raises(ValueError, match=match):
        LLM(model_path(NAME), max_running_reqs=2, max_seq_len=64, **kwargs)


def test_the_server_takes_the_admission_flags():
    from minisgl.server.args import parse_args

    args = parse_args(["--model", "m", "--admission", "optimistic", "--retraction-policy", "last",
                       "--max-retractions", "2"])
    assert args.scheduler_config == SchedulerConfig(admission="optimistic", retraction_policy="last", max_retractions=2)
    assert parse_args(["--model", "m"]).scheduler_config == SchedulerConfig(), "the defaults unless asked"
    for bad in (["--admission", "bold"], ["--max-retractions", "0"]):
        with pytest.raises(SystemExit):
            parse_args(["--model", "m", *bad])



@pytest.mark.stubs(*RUN_STUBS)
def test_a_server_with_optimistic_admission_retracts_and_answers_as_the_offline_engine():
    """`python -m minisgl.server --admission optimistic` on the tight pool: the flag reaches the scheduler process
    (/health counts its retractions), the answers equal the offline engine's and HF greedy, and every
    slot is free or cached afterwards. The 8 requests wait in a paused server until all are there, then run
    together as the offline engine's do: however the machine's load spaces their arrival, the pool runs dry."""
    offline, _, _, retracted = generate(TIGHT)  # in this process first: on the skeleton, the stub fails here
    assert retracted, "the fixture must retract"
    check_hf(offline)
    tok = tokenizer(NAME)
    env = os.environ | {"MINISGL_INIT_NEW_TOKEN_RATIO": "0.1"}  # the scheduler process's ratio starts low
    flags = ("--max-running-reqs", "8", "--max-seq-len", "64", "--page-size", "1", "--num-pages", str(TIGHT),
             "--admission", "optimistic", "--no-overlap")
    with LocalServer(model_path(NAME), *flags, env=env, echo=False) as server:
        def ask(ids: list[int]) -> str:
            r = httpx.post(server.url + "/v1/completions", timeout=120, json=dict(
                model=NAME, prompt=ids, max_tokens=MAX_TOKENS, temperature=0, ignore_eos=True))
            assert r.status_code == 200, f"{r.status_code} {r.text}"
            return r.json()["choices"][0]["text"]

        hold(server.url, 0)
        with ThreadPoolExecutor(len(offline)) as pool:
            futures = [pool.submit(ask, ids) for ids in prompts()]
            health_until(server.url, lambda s: s.get("waiting") == len(offline), "the 8 requests wait together",
                         check=lambda: [f.result() for f in futures if f.done()])  # one that ended says why
            hold(server.url, None)
            answers = [f.result() for f in futures]
        for i, (answer, out) in enumerate(zip(answers, offline)):
            want = tok.decode(out, skip_special_tokens=True)
            assert answer == want, f"request {i}: the server answered {answer!r}, the offline engine {want!r}"
        status = health_until(server.url, lambda s: s.get("integrity_checked"), "every request is let go")
        assert status["retractions"] > 0, f"8 requests together on {TIGHT} slots retract (optimistic admission): {status}"
        assert status["available_slots"] == status["total_slots"], f"every KV slot free or cached: {status}"
