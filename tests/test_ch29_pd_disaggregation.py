"""Chapter 29: prefill/decode disaggregation. The packed KV against the pool read slot by slot; the decode side's
admission against the pool's arithmetic; the prefill side's release against the transfers confirmed; then a prefill
engine and a decode engine, each in a process of its own and joined by torch.distributed (a TCPStore, gloo
send/recv), answering as one engine does and as Hugging Face greedy does, and leaving no page behind when either side
aborts or the decode side dies. Each side is driven command by command (tests/disagg_worker.py): a test builds the
state it checks, nothing waits on timing except the one test that waits for a dead peer to be noticed."""

from __future__ import annotations

import time
from contextlib import contextmanager

import pytest
import torch

from disagg_worker import pair
import httpx

from helpers import CHAT, ROOT, TEXTS, health_until, hf_greedy, hold, model_path, prompt_ids, tokenizer

NAME = "tiny-qwen3"
ENGINE = dict(max_running_reqs=8, max_seq_len=128, page_size=4, num_pages=64)
TOKENS = 12


def make_engine(**overrides):
    from minisgl.engine import Engine, EngineConfig

    args = ENGINE | overrides
    return Engine(EngineConfig(model_path(NAME), device="cpu", dtype="float32", **args))


def run_one_engine(prompts: list[list[int]], **params) -> dict[int, list[int]]:
    """The same requests on one ordinary engine: the answer disaggregation must give."""
    from minisgl.core import SamplingParams
    from minisgl.scheduler.config import SchedulerConfig
    from minisgl.scheduler.scheduler import Scheduler
    from minisgl.scheduler.utils import PendingReq

    sched = Scheduler(make_engine(), SchedulerConfig(overlap=False))
    for uid, ids in enumerate(prompts):
        sched.add_request(PendingReq(uid, torch.tensor(ids, dtype=torch.int32), SamplingParams(**params)))
    sched.run_until_idle()
    return {uid: sched.take_finished(uid).output_ids for uid in range(len(prompts))}


@pytest.fixture
def sides():
    made = []

    def start(peer_timeout_s: float = 600.0, **engine):
        prefill, decode = pair(str(model_path(NAME)), ENGINE | engine, peer_timeout_s=peer_timeout_s)
        made.extend([prefill, decode])
        return prefill, decode

    yield start
    for side in made:
        side.close()


def assert_both_clean(prefill, decode) -> None:
    for side in (prefill, decode):
        problem = side("integrity")
        assert problem is None, f"{side.role} side: {problem}"
        status = side("status")
        assert status["available_slots"] == status["total_slots"], \
            f"{side.role} side holds {status['total_slots'] - status['available_slots']} slots after every request " \
            f"ended: {status}"


# --- pack and unpack, against the pool read slot by slot ----------------------------------------------------------

def filled_engine():
    """An engine whose pool holds a real prompt's KV, and the slots of that prompt."""
    from minisgl.core import SamplingParams
    from minisgl.scheduler.config import SchedulerConfig
    from minisgl.scheduler.scheduler import Scheduler
    from minisgl.scheduler.utils import PendingReq

    engine = make_engine()
    sched = Scheduler(engine, SchedulerConfig(overlap=False))
    ids = prompt_ids(NAME, 1)[0]
    sched.add_request(PendingReq(0, torch.tensor(ids, dtype=torch.int32), SamplingParams(max_tokens=4)))
    sched.step()  # the prefill: the prompt's KV is in the pool
    req = sched.decode_manager.running[0]
    slots = sched.cache_manager.host_table[req.table_idx, : len(ids)].clone()
    return engine, slots


@pytest.mark.stubs("pack_kv")
def test_pack_kv_gathers_every_layer_keys_first():
    from minisgl.disagg import kv_shape, pack_kv

    engine, slots = filled_engine()
    kv = engine.kv_cache
    packed = pack_kv(kv, slots)
    assert tuple(packed.shape) == kv_shape(kv, len(slots)), f"packed shape {tuple(packed.shape)}"
    for layer in range(kv.num_layers):
        for i, slot in enumerate(slots.tolist()):
            for which, pool in ((0, kv.k_cache(layer)), (1, kv.v_cache(layer))):
                assert torch.equal(packed[which, layer, i], pool[slot]), \
                    f"packed[{which}, layer {layer}, token {i}] is not slot {slot}'s {('key', 'value')[which]}"
    before = packed.clone()
    kv.k_cache(0)[slots] += 1.0  # the pool moves on (the pages freed and reused): the packed copy must not
    assert torch.equal(packed, before), "pack_kv returned a view of the pool, not a copy of its own"


@pytest.mark.stubs("unpack_kv")
def test_unpack_kv_writes_each_token_to_its_slot_and_checks_the_shape():
    from minisgl.disagg import kv_shape, unpack_kv

    engine = make_engine()
    kv = engine.kv_cache
    n = 6
    slots = torch.tensor([13, 2, 40, 41, 7, 30])  # scattered, out of order: as pages hand them out
    torch.manual_seed(0)
    packed = torch.randn(kv_shape(kv, n))
    untouched = [s for s in range(kv.num_slots) if s not in slots.tolist()]
    unpack_kv(kv, slots, packed)
    for layer in range(kv.num_layers):
        for i, slot in enumerate(slots.tolist()):
            assert torch.equal(kv.k_cache(layer)[slot], packed[0, layer, i]), \
                f"layer {layer} token {i}: key not in slot {slot}"
            assert torch.equal(kv.v_cache(layer)[slot], packed[1, layer, i]), \
                f"layer {layer} token {i}: value not in slot {slot}"
        assert not kv.k_cache(layer)[untouched].any(), f"layer {layer}: a slot outside `slots` was written"
    with pytest.raises(ValueError, match="shape"):
        unpack_kv(kv, slots[:5], packed)


# --- the decode side's admission and the prefill side's release ---------------------------------------------------

@pytest.mark.stubs("DecodeScheduler.admit")
def test_decode_admission_takes_pages_for_the_prompt_and_reserves_the_rest():
    from minisgl.core import SamplingParams
    from minisgl.disagg import DecodeScheduler
    from minisgl.scheduler.config import SchedulerConfig
    from minisgl.scheduler.utils import PendingReq

    engine = make_engine(num_pages=12)  # 48 slots, pages of 4
    sched = DecodeScheduler(engine, SchedulerConfig(overlap=False), channel=None)
    cache = sched.cache_manager
    ids = torch.arange(5, 15, dtype=torch.int32)  # 10 prompt tokens: 3 pages
    first = sched.admit(PendingReq(1, ids, SamplingParams(max_tokens=19)))  # 10 + 19 - 1 = 28 slots: 7 pages
    assert first is not None, "a request that fits the empty pool was not admitted"
    assert (first.cached_len, first.device_len) == (0, 10), f"admitted as {first}"
    row = cache.host_table[first.table_idx, :10]
    assert len(set((row // 4).tolist())) == 3, f"the prompt's 10 positions should sit in 3 pages, got slots {row}"
    assert torch.equal(sched.table_manager.token_pool[first.table_idx, :10], ids), "prompt ids not in the token pool"
    assert cache.available_size == 48 - 12, f"available {cache.available_size}: only the prompt's 3 pages are taken"
    first.complete_one()  # as if its KV had arrived: the prompt is cached, and it runs
    sched.check_integrity()  # it is live: its pages count as held
    sched.decode_manager.add([first])  # it may still write up to 28 slots (7 pages)
    # 48 - 12 taken = 36 left, the running request will take 16 more: 20 left; a request needing 24 waits
    assert sched.admit(PendingReq(2, ids, SamplingParams(max_tokens=15))) is None, \
        "admitted a request whose 24 slots exceed what the running request leaves (20)"
    assert cache.available_size == 36, "a refused admission changed the pool"
    second = sched.admit(PendingReq(3, ids, SamplingParams(max_tokens=11)))  # 20 slots: fits exactly
    assert second is not None, "refused a request that fits exactly (20 of 20 slots)"
    second.complete_one()
    sched.check_integrity()


@pytest.mark.stubs("PrefillScheduler.release_confirmed")
def test_release_frees_exactly_the_confirmed_transfers():
    from minisgl.core import SamplingParams
    from minisgl.disagg.prefill import Parked, PrefillScheduler
    from minisgl.scheduler.config import SchedulerConfig
    from minisgl.scheduler.scheduler import Scheduler
    from minisgl.scheduler.utils import PendingReq

    sched = PrefillScheduler(make_engine(), SchedulerConfig(overlap=False), channel=None)
    for uid in range(3):
        ids = torch.tensor(prompt_ids(NAME, 3)[uid], dtype=torch.int32)
        # an ordinary request (no room): it keeps running after its prefill
        Scheduler.add_request(sched, PendingReq(uid, ids, SamplingParams(max_tokens=4)))
    sched.step()
    reqs = list(sched.decode_manager.running)
    for k, req in enumerate(reqs):  # as if each had finished its prefill and its KV were sent as transfer k
        sched.decode_manager.remove(req)
        sched.parked[k] = Parked(req, None, torch.empty(0))
    held = sched.cache_manager.available_size
    sched.release_confirmed(2)
    assert sorted(sched.parked) == [2], f"received 2 confirms transfers 0 and 1 only; still parked: {sorted(sched.parked)}"
    assert sched.cache_manager.available_size > held, "the confirmed transfers' pages were not freed"
    sched.check_integrity()  # transfer 2 still holds its row and pages, the others none
    sched.release_confirmed(2)  # the same count again frees nothing twice
    sched.release_confirmed(3)
    assert not sched.parked, f"still parked after every transfer was confirmed: {sorted(sched.parked)}"
    sched.check_integrity()
    assert sched.cache_manager.available_size == sched.cache_manager.num_slots


# --- two engines, two processes, one channel ----------------------------------------------------------------------

ALL = ("pack_kv", "unpack_kv", "DecodeScheduler.admit", "PrefillScheduler.release_confirmed")


@pytest.mark.stubs(*ALL)
def test_prefill_then_decode_answers_as_one_engine_and_hf(sides):
    prefill, decode = sides()
    prompts = prompt_ids(NAME, 3)
    greedy = dict(max_tokens=TOKENS, ignore_eos=True)
    sampled = dict(max_tokens=TOKENS, ignore_eos=True, temperature=1.0, seed=7)
    for uid, ids in enumerate(prompts):
        room = 1000 + uid
        decode("add", uid, ids, room, **greedy)  # the router sends each request to both sides at once
        prefill("add", uid, ids, room, **greedy)
        decode("add", 10 + uid, ids, room + 10, **sampled)
        prefill("add", 10 + uid, ids, room + 10, **sampled)
    first = prefill("run")
    got = decode("run")
    prefill("poll")
    one = run_one_engine(prompts, **greedy) | {10 + u: o for u, o in run_one_engine(prompts, **sampled).items()}
    for uid, ids in enumerate(prompts):
        want = hf_greedy(NAME, ids, TOKENS)
        assert first[uid] == ([want[0]], "length"), f"request {uid}: the prefill side's token {first[uid]}, HF {want[0]}"
        assert got[uid][0] == want, f"request {uid} (greedy): disaggregated {got[uid][0]}\n HF greedy {want}"
        assert got[uid][0] == one[uid], f"request {uid}: disaggregated {got[uid][0]}\n one engine {one[uid]}"
        assert got[10 + uid][0] == one[10 + uid], \
            f"request {10 + uid} (sampled, seed 7): disaggregated {got[10 + uid][0]}\n one engine {one[10 + uid]}"
    assert decode("status")["transfers_received"] == 6
    assert_both_clean(prefill, decode)


@pytest.mark.stubs(*ALL)
def test_prefill_holds_pages_until_the_decode_side_confirms(sides):
    prefill, decode = sides()
    prompts = prompt_ids(NAME, 3)
    for uid, ids in enumerate(prompts):
        prefill("add", uid, ids, 50 + uid, max_tokens=TOKENS, ignore_eos=True)
    prefill("run")
    prefill("poll")
    status = prefill("status")
    assert status["transfers_parked"] == 3, f"nothing confirmed yet, all 3 transfers hold their pages: {status}"
    assert status["available_slots"] < status["total_slots"], f"the parked requests' pages were freed: {status}"
    assert prefill("integrity") is None
    decode("add", 0, prompts[0], 50, max_tokens=TOKENS, ignore_eos=True)  # the first request reaches the decode side
    got = decode("run")  # transfer 0 is received; transfer 1's request has not arrived: it waits
    prefill("poll")
    assert prefill("status")["transfers_parked"] == 2, \
        f"the decode side confirmed transfer 0 only: {prefill('status')}"
    for uid in (1, 2):
        decode("add", uid, prompts[uid], 50 + uid, max_tokens=TOKENS, ignore_eos=True)
    got |= decode("run")
    prefill("poll")
    assert prefill("status")["transfers_parked"] == 0
    for uid, ids in enumerate(prompts):
        assert got[uid][0] == hf_greedy(NAME, ids, TOKENS), f"request {uid}"
    assert_both_clean(prefill, decode)


@pytest.mark.stubs(*ALL)
def test_decode_side_admits_a_transfer_only_when_it_fits(sides):
    # 10 pages of 4: one request of a 10-token prompt and 16 output tokens (25 slots, 7 pages) at a time; admitted
    # without counting what the first may still write, the second would fit its prompt and run the pool dry
    prefill, decode = sides(num_pages=10)
    prompts = prompt_ids(NAME, 2)
    assert all(len(ids) == 10 for ids in prompts), "the fixture's prompts changed: recompute the pool size"
    for uid, ids in enumerate(prompts):
        decode("add", uid, ids, 70 + uid, max_tokens=16, ignore_eos=True)
        prefill("add", uid, ids, 70 + uid, max_tokens=16, ignore_eos=True)
    prefill("run")
    decode("poll")
    status = decode("status")
    assert (status["running"], status["transfers_waiting"]) == (1, 1), \
        f"the second request does not fit beside the first and must wait for it: {status}"
    got = decode("run")
    prefill("poll")
    for uid, ids in enumerate(prompts):
        assert got[uid][0] == hf_greedy(NAME, ids, 16), f"request {uid}"
    assert_both_clean(prefill, decode)


@pytest.mark.stubs(*ALL)
def test_abort_on_the_decode_side_frees_both_sides(sides):
    prefill, decode = sides()
    prompts = prompt_ids(NAME, 3)
    for uid, ids in enumerate(prompts):
        decode("add", uid, ids, 90 + uid, max_tokens=TOKENS, ignore_eos=True)
        prefill("add", uid, ids, 90 + uid, max_tokens=TOKENS, ignore_eos=True)
    assert decode("abort", 0), "request 0 waits for its KV: it can be aborted"
    prefill("run")  # its KV is sent anyway (the prefill side has not heard of the abort)
    decode("poll")  # ...and received into nothing, confirmed so that the prefill side frees it
    decode("step")
    assert decode("abort", 1), "request 1 is decoding: it can be aborted"
    got = decode("run")
    prefill("poll")
    assert 0 not in got and 1 not in got, f"aborted requests reported as finished: {got}"
    assert got[2][0] == hf_greedy(NAME, prompts[2], TOKENS), "request 2, beside the aborted ones"
    assert prefill("status")["transfers_parked"] == 0
    assert_both_clean(prefill, decode)


@pytest.mark.stubs(*ALL)
def test_abort_on_the_prefill_side_ends_the_request_on_both(sides):
    prefill, decode = sides()
    prompts = prompt_ids(NAME, 2)
    for uid, ids in enumerate(prompts):
        decode("add", uid, ids, 110 + uid, max_tokens=TOKENS, ignore_eos=True)
        prefill("add", uid, ids, 110 + uid, max_tokens=TOKENS, ignore_eos=True)
    assert prefill("abort", 0), "request 0 waits for its prefill: it can be aborted"
    prefill("run")
    got = decode("run")
    prefill("poll")
    assert got[0] == ([], "abort"), f"request 0 was aborted on the prefill side: the decode side says {got.get(0)}"
    assert got[1][0] == hf_greedy(NAME, prompts[1], TOKENS), "request 1, behind the aborted one on the channel"
    assert_both_clean(prefill, decode)


@pytest.mark.stubs(*ALL)
def test_a_dead_decode_side_is_noticed_and_the_pages_freed(sides):
    prefill, decode = sides(peer_timeout_s=1.0)
    prompts = prompt_ids(NAME, 2)
    for uid, ids in enumerate(prompts):
        prefill("add", uid, ids, 130 + uid, max_tokens=TOKENS, ignore_eos=True)
    decode("poll")  # the decode side beats once, then dies without taking anything
    prefill("run")
    assert prefill("status")["transfers_parked"] == 2
    decode.process.kill()
    decode.process.join(10)
    deadline = time.monotonic() + 60
    while prefill("status")["transfers_parked"] and time.monotonic() < deadline:
        prefill("poll")
        time.sleep(0.2)
    status = prefill("status")
    assert status["transfers_parked"] == 0 and status["decode_alive"] == 0, \
        f"the decode side died: its transfers should be let go of within 60 s: {status}"
    assert prefill("integrity") is None
    assert status["available_slots"] == status["total_slots"], status
    # the prefill side still serves: a later request's prefill runs, and its pages are let go of at once
    prefill("add", 5, prompts[0], 150, max_tokens=TOKENS, ignore_eos=True)
    assert prefill("run")[5][0] == [hf_greedy(NAME, prompts[0], 1)[0]]
    prefill("poll")
    assert prefill("status")["transfers_parked"] == 0
    assert prefill("integrity") is None


def test_bad_input_is_refused_and_changes_nothing():
    from minisgl.core import SamplingParams
    from minisgl.disagg import DecodeScheduler, KVChannel
    from minisgl.scheduler.config import SchedulerConfig
    from minisgl.scheduler.utils import PendingReq

    with pytest.raises(ValueError, match="role"):
        KVChannel("both", "127.0.0.1", 1)
    with pytest.raises(ValueError, match="backend"):
        KVChannel("decode", "127.0.0.1", 1, backend="mpi")
    sched = DecodeScheduler(make_engine(), SchedulerConfig(overlap=False), channel=None)
    ids = torch.tensor(prompt_ids(NAME, 1)[0], dtype=torch.int32)
    with pytest.raises(ValueError, match="logprobs"):
        sched.add_request(PendingReq(1, ids, SamplingParams(logprobs=True)), room=5)
    sched.add_request(PendingReq(2, ids, SamplingParams()), room=5)
    with pytest.raises(ValueError, match="room 5"):
        sched.add_request(PendingReq(3, ids, SamplingParams()), room=5)
    with pytest.raises(ValueError, match="outside|vocab|token"):
        sched.add_request(PendingReq(4, torch.tensor([10**6], dtype=torch.int32), SamplingParams()), room=6)
    assert list(sched.waiting) == [5] and sched.rooms == {2: 5}, "a refused request changed what waits"
    assert sched.abort_request(2) and not sched.waiting
    sched.check_integrity()


# --- two servers behind sglang-router in prefill/decode mode -----------------------------------------------------

ROUTER_PYTHON = ROOT / "build" / "sglang-router" / "bin" / "python"
needs_router = pytest.mark.skipif(not ROUTER_PYTHON.exists(), reason="sglang-router is not installed: `make router` "
                                  "puts it in build/sglang-router (a wheel from PyPI, ~150 MB)")


@pytest.fixture(scope="module")
def pd():
    """A prefill server, a decode server and the real router in front of them (chapter 29's launcher)."""
    if not ROUTER_PYTHON.exists():
        pytest.skip("sglang-router is not installed: `make router` puts it in build/sglang-router")
    from minisgl.router.pd import PrefillDecode

    router = [str(ROUTER_PYTHON), "-m", "sglang_router.launch_router"]
    flags = ["--device", "cpu", "--max-seq-len", "128", "--cpu-kv-cache-mb", "8"]
    with PrefillDecode(str(model_path(NAME)), router, flags, port=0, echo=False) as launched:
        yield launched  # the bad-input test runs first: the others may leave a server dead (a stub raised there)


@needs_router
def test_bad_input_to_a_pd_server_gets_an_openai_error(pd):
    cases = [
        (pd.decode, {}, "bootstrap_room"),  # straight to a server, not through the router: no room
        (pd.prefill, {}, "bootstrap_room"),
        (pd.decode, {"bootstrap_room": -1}, "bootstrap_room"),
        (pd.decode, {"bootstrap_room": 5, "n": 2}, "n > 1"),
        (pd.decode, {"bootstrap_room": 6, "logprobs": 1}, "logprobs"),
    ]
    for server, extra, words in cases:
        body = {"model": NAME, "prompt": TEXTS[0], "max_tokens": 4} | extra
        r = httpx.post(server.url + "/v1/completions", json=body, timeout=60)
        assert r.status_code == 400, f"{extra} to {server.url}: {r.status_code} {r.text}"
        error = r.json()["error"]
        assert words in error["message"] and error["type"] == "invalid_request_error", f"{extra}: {error}"
    status = health_until(pd.decode.url, lambda s: s.get("integrity_checked") == 1, "the decode side idle")
    assert status["transfers_waiting"] == 0 and status["available_slots"] == status["total_slots"], status


@contextmanager
def servers_explained(pd):
    """A failure inside comes out with both servers' last lines: a stub that raised in a worker names itself there
    (the router's own error only says that a server did not answer)."""
    try:
        yield
    except Exception as e:
        raise AssertionError(f"{type(e).__name__}: {e}\n-- prefill server --\n{pd.prefill.tail()}\n"
                             f"-- decode server --\n{pd.decode.tail()}") from e


@needs_router
@pytest.mark.stubs(*ALL)
def test_answers_through_the_router_equal_hf_greedy(pd):
    """sglang-router sends each request to both servers with bootstrap_host, bootstrap_port and bootstrap_room, and
    answers with the decode server's reply: chat, completions and a stream, token for token as HF greedy."""
    with servers_explained(pd):
        check_answers(pd)


def check_answers(pd) -> None:
    from openai import OpenAI

    tok = tokenizer(NAME)
    client = OpenAI(base_url=pd.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    messages = [{"role": "user", "content": CHAT[0]}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    want = tok.decode(hf_greedy(NAME, list(ids), 10, stop_at_eos=True), skip_special_tokens=True)
    got = client.chat.completions.create(model=NAME, messages=messages, max_tokens=10, temperature=0)
    assert got.choices[0].message.content == want, f"chat: {got.choices[0].message.content!r} vs HF {want!r}"
    for i, text in enumerate(TEXTS[:3]):
        want_ids = hf_greedy(NAME, tok.encode(text), 8)
        want = tok.decode(want_ids, skip_special_tokens=True)
        r = client.completions.create(model=NAME, prompt=text, max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
        assert r.choices[0].text == want, f"prompt {i}: {r.choices[0].text!r} vs HF {want!r}"
        assert r.usage.completion_tokens == 8, f"prompt {i}: usage {r.usage}"
    stream = client.completions.create(model=NAME, prompt=TEXTS[3], max_tokens=8, temperature=0, stream=True,
                                       extra_body={"ignore_eos": True})
    text = "".join(chunk.choices[0].text for chunk in stream if chunk.choices)
    want = tok.decode(hf_greedy(NAME, tok.encode(TEXTS[3]), 8), skip_special_tokens=True)
    assert text == want, f"stream: {text!r} vs HF {want!r}"
    for server, key in ((pd.prefill, "transfers_parked"), (pd.decode, "transfers_waiting")):
        status = health_until(server.url, lambda s: s.get(key) == 0 and s.get("integrity_checked") == 1,
                              f"{key} back to 0 and the integrity checked")
        assert status["available_slots"] == status["total_slots"], f"{server.url}: {status}"


@needs_router
def test_the_benchmark_measures_through_the_router(pd):
    """`make bench-pd` times its requests with this function: it must read answers through the router (TTFT and TPOT
    of every request, the tokens counted)."""
    from benchmark.online import RequestSpec
    from benchmark.pd import measure

    specs = [RequestSpec(i, TEXTS[i], 4) for i in range(2)]
    with servers_explained(pd):
        m = measure(pd.url, NAME, specs, [0.0, 0.0], "completions")
    # TPOT may be 0: a tiny model's few tokens can reach the client in one streamed frame
    assert m["output_tokens"] == 8 and m["ttft_p50_s"] > 0 and m["tpot_p50_s"] >= 0, f"bench-pd's measure: {m}"


@needs_router
@pytest.mark.stubs(*ALL)
def test_a_decode_server_that_dies_is_noticed_by_the_prefill_server(pd):
    """The decode server is paused, a request's KV is parked on the prefill server, then the decode server stops:
    the prefill server notices that its peer's beat stood still and frees the parked pages. (Last in the module: it
    takes the decode server away.)"""
    with servers_explained(pd):
        check_dead_decode(pd)


def check_dead_decode(pd) -> None:
    import threading

    hold(pd.decode.url, 0)
    answer: dict = {}

    def ask() -> None:
        try:
            answer["r"] = httpx.post(pd.url + "/v1/completions", json={"model": NAME, "prompt": TEXTS[1],
                                                                      "max_tokens": 8, "temperature": 0}, timeout=120)
        except httpx.HTTPError as e:
            answer["r"] = e

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    health_until(pd.prefill.url, lambda s: s.get("transfers_parked") == 1, "the prefill server parks the KV")
    pd.decode.stop()
    status = health_until(pd.prefill.url, lambda s: s.get("transfers_parked") == 0 and s.get("decode_alive") == 0,
                          "the prefill server lets go of the parked KV of a dead decode server", timeout=90)
    status = health_until(pd.prefill.url, lambda s: s.get("integrity_checked") == 1, "the prefill server idle")
    assert status["available_slots"] == status["total_slots"], f"prefill server after its peer died: {status}"
    asking.join(150)
    r = answer.get("r")
    assert not isinstance(r, httpx.Response) or r.status_code != 200, f"an answer from a dead decode server: {r}"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="NCCL between a prefill and a decode engine needs two GPUs (one rank per GPU)")
def test_nccl_channel_carries_a_packed_kv_between_two_gpus():
    import multiprocessing as mp

    from disagg_worker import free_port

    port = free_port()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_nccl_side, args=(role, port, queue)) for role in ("prefill", "decode")]
    for p in procs:
        p.start()
    got = queue.get(timeout=300)
    for p in procs:
        p.join(60)
    assert got == "equal", got


def _nccl_side(role: str, port: int, queue) -> None:
    from minisgl.disagg import KVChannel

    torch.cuda.set_device(0 if role == "prefill" else 1)
    channel = KVChannel(role, "127.0.0.1", port, backend="nccl")
    torch.manual_seed(0)
    kv = torch.randn(2, 3, 17, 2, 32, device="cuda", dtype=torch.bfloat16)
    if role == "prefill":
        channel.send(kv).wait()
        torch.cuda.synchronize()
    else:
        got = channel.recv(tuple(kv.shape), kv.dtype)
        torch.cuda.synchronize()
        queue.put("equal" if torch.equal(got, kv) else "the KV received differs from the KV sent")
