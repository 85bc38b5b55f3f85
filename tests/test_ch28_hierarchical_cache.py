"""Chapter 28: a host tier under the radix cache (HiCache-style). The host pool's copies against the device pool read
slot by slot; the tree's two tiers (a match split where the device part ends, eviction that demotes instead of
dropping, the host pool's own LRU) against small hand-built trees; then whole runs on tiny-qwen3 with a device pool
too small for the prompts' shared prefixes: answers equal Hugging Face greedy, every prefix that a radix cache with
unlimited room would find is found (on the host when the device dropped it), and the accounting of both tiers holds
after every step, while copies are in flight, under pressure and after an abort while a load is in flight."""

from __future__ import annotations

import random
from functools import lru_cache

import pytest
import torch

from helpers import CHAT, TEXTS, assert_clean, hf_greedy, model_path, tokenizer
from minisgl.core import SamplingParams
from minisgl.kvcache.hiradix_cache import HiRadixCache
from minisgl.kvcache.host_pool import HostKVPool
from minisgl.kvcache.mha_pool import MHAKVCache
from minisgl.kvcache.prefix_cache import CacheHandle
from minisgl.llm import LLM
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.utils import PendingReq

NAME = "tiny-qwen3"
TOKENS = 8
PAGE = 4
DEVICE_PAGES = 16  # 64 slots: one request (a 40-token system prompt, a question, 8 tokens) fits, two do not
ALL = ("HostKVPool.copy_pages", "HiRadixCache.match_tiers", "HiRadixCache._demote", "HiCacheManager.load_back")
POLICIES = ("write_through", "write_back")


# --- fixtures: prompts that share system prompts ----------------------------------------------------------------

@lru_cache(maxsize=1)
def system_prompts() -> list[list[int]]:
    tok = tokenizer(NAME)
    return [tok.encode(" ".join(TEXTS))[:40], tok.encode(" ".join(CHAT))[:40],
            tok.encode(" ".join(reversed(TEXTS)))[:40]]


def questions() -> list[list[int]]:
    tok = tokenizer(NAME)
    return [tok.encode(t)[:6] for t in TEXTS + CHAT]


def alternating() -> list[list[int]]:
    """Turns of two sessions taking turns: each turn's system prompt was pushed out of the device pool by the other
    session's turn in between."""
    s = system_prompts()
    return [s[i % 2] + q for i, q in enumerate(questions())]


def make_llm(policy: str | None, overlap: bool = False, ratio: float = 4.0, **kwargs) -> LLM:
    hicache = dict(enable_hierarchical_cache=True, hicache_write_policy=policy, hicache_ratio=ratio) if policy else {}
    return LLM(model_path(NAME), max_running_reqs=4, max_seq_len=128, page_size=PAGE, num_pages=DEVICE_PAGES,
               overlap=overlap, **hicache, **kwargs)


def greedy() -> SamplingParams:
    return SamplingParams(max_tokens=TOKENS, ignore_eos=True)


def first_difference(got: list[int], want: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))


def assert_hf(prompts: list[list[int]], outputs: list[list[int]], what: str) -> None:
    for i, (prompt, got) in enumerate(zip(prompts, outputs)):
        want = hf_greedy(NAME, prompt, TOKENS)
        assert got == want, f"{what}: request {i} differs from HF greedy from token {first_difference(got, want)}"


def unlimited_radix_hits(prompts: list[list[int]], outputs: list[list[int]]) -> list[int]:
    """What a radix cache that never evicts would find for each prompt run one after another: the longest common
    prefix, in whole pages, of the prompt less its last token with any earlier request's computed tokens (prompt and
    output, less the last output token, whose KV is never computed)."""
    done, hits = [], []
    for prompt, out in zip(prompts, outputs):
        ask = prompt[:-1]
        best = max((first_difference(ask, seq) for seq in done), default=0)
        hits.append(best - best % PAGE)
        done.append((prompt + out)[:-1])
    return hits


def run_one_by_one(llm: LLM, prompts: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """Each prompt alone, in order; the outputs, and the cached tokens each admission found. Integrity after each."""
    sched, outputs, hits = llm.scheduler, [], []
    for prompt in prompts:
        before = sched.prefill_manager.cached_tokens
        outputs.append(llm.generate([prompt], greedy())[0]["token_ids"])
        hits.append(sched.prefill_manager.cached_tokens - before)
        sched.check_integrity()
    return outputs, hits


# --- a hand-built tree over a small device pool and host pool -----------------------------------------------------

class Tree:
    """A HiRadixCache with a backup that only takes host pages (the copies are the host pool's test's business), and
    device slots handed out by a counter."""

    def __init__(self, policy: str, host_pages: int, page_size: int = 2) -> None:
        self.pool = MHAKVCache(1, 2, 2, 32, page_size)
        self.host = HostKVPool(self.pool, host_pages, page_size)
        self.tree = HiRadixCache(page_size, self.host, policy)
        self.tree.backup = self._backup
        self.backed: list[list[int]] = []  # keys backed up, in order
        self._next = 0

    def _backup(self, node) -> bool:
        slots = self.tree.alloc_host(len(node))
        if slots is None:
            return False
        node.host_value = slots
        self.backed.append(list(node.key))
        return True

    def insert(self, ids: list[int]) -> torch.Tensor:
        """Insert ids with fresh device slots for all of them (a request that computed them); the slots it kept."""
        slots = torch.arange(self._next, self._next + len(ids), dtype=torch.int32)
        self._next += len(ids)
        self.tree.insert_prefix(ids, slots)
        return slots

    def check(self) -> None:
        self.tree.check_integrity()


@pytest.mark.stubs("HostKVPool.copy_pages")
def test_host_pool_copies_pages_both_ways_slot_for_slot():
    torch.manual_seed(0)
    pool = MHAKVCache(2, 4, 3, 8, page_size=2)
    for i in range(pool.num_layers):
        pool.k_cache(i).copy_(torch.randn_like(pool.k_cache(i)))
        pool.v_cache(i).copy_(torch.randn_like(pool.v_cache(i)))
    host = HostKVPool(pool, 4, page_size=2)
    device_slots, host_slots = torch.tensor([6, 7, 2, 3]), torch.tensor([0, 1, 4, 5])
    host.copy_pages(pool, device_slots, host_slots, to_host=True)
    for i in range(pool.num_layers):
        assert torch.equal(host.buffer[0, i, host_slots], pool.k_cache(i)[device_slots]), f"layer {i}: keys written"
        assert torch.equal(host.buffer[1, i, host_slots], pool.v_cache(i)[device_slots]), f"layer {i}: values written"
    assert not host.buffer[:, :, [2, 3, 6, 7]].any(), "a write touches only the host slots it was given"
    before = [pool.k_cache(i).clone() for i in range(pool.num_layers)]
    back = torch.tensor([0, 1, 4, 5])  # other device pages: a load lands wherever the scheduler allocated
    host.copy_pages(pool, back, host_slots, to_host=False)
    for i in range(pool.num_layers):
        assert torch.equal(pool.k_cache(i)[back], before[i][device_slots]), f"layer {i}: keys loaded back"
        assert torch.equal(pool.v_cache(i)[back], pool.v_cache(i)[device_slots]), f"layer {i}: values loaded back"
        untouched = [2, 3, 6, 7]
        assert torch.equal(pool.k_cache(i)[untouched], before[i][untouched]), "a load touches only its device slots"


@pytest.mark.stubs("HiRadixCache.match_tiers", "HiRadixCache._demote")
def test_a_match_reads_the_device_part_then_the_host_part_split_where_the_query_leaves_the_tree():
    t = Tree("write_through", host_pages=16)
    x, y = [1, 2, 3, 4], [5, 6, 7, 8, 9, 10]
    x_slots = t.insert(x)
    t.insert(x + y)  # y hangs under x as a leaf
    assert t.backed == [x, y], "write-through backs each new leaf up when it is inserted"
    freed = t.tree.evict(2)  # the least recently used device leaf is y: all of it goes, host-only now
    assert sorted(freed.tolist()) == list(range(8, 14)), f"evicting y frees its 6 device slots, got {freed.tolist()}"
    t.check()
    device, slots, host = t.tree.match_tiers(x + y[:4] + [99, 100])  # leaves the tree inside y, after 2 of its pages
    assert device.cached_len == 4 and slots.tolist() == x_slots.tolist(), \
        f"the device part is x (4 tokens at {x_slots.tolist()}), got {device.cached_len} at {slots.tolist()}"
    assert host is not None and host.cached_len == 8, \
        f"the host part follows it up to where the query leaves the tree (8 tokens), got {host and host.cached_len}"
    assert list(host.node.key) == y[:4] and not host.node.on_device and len(host.node.host_value) == 4, \
        "the host-only node is split at the query's page boundary, its host slots with it"
    t.check()
    device, _, host = t.tree.match_tiers(x[:3])  # 3 tokens: one whole page of x
    assert device.cached_len == 2 and host is None, "a match on the device part alone has no host part"
    handle, _ = t.tree.match_prefix(x + y)
    assert handle.cached_len == 4, "match_prefix (chapter 9's interface) gives the device part only"


@pytest.mark.stubs("HiRadixCache._demote")
def test_write_through_eviction_keeps_nodes_on_the_host_and_reinsertion_brings_them_back():
    t = Tree("write_through", host_pages=16)
    a = [1, 2, 3, 4, 5, 6]
    t.insert(a)
    t.tree.evict(6)
    assert t.tree.evictable_size == 0 and t.tree.cached_slots().numel() == 0, "the device copy is gone"
    assert t.tree.tier_sizes()["host_only_tokens"] == 6, "the node stays in the tree, host-only"
    t.check()
    # A request that computed the same tokens again (it was admitted before they were evicted) hands its slots in:
    # the host-only node takes them, none of them is a duplicate to free.
    slots = torch.arange(20, 26, dtype=torch.int32)
    existed, handle = t.tree.insert_prefix(a, slots)
    assert existed == 0 and handle.node.on_device and handle.node.value.tolist() == slots.tolist(), \
        "a host-only node on an insert's path takes the caller's device slots"
    t.check()


@pytest.mark.stubs("HiRadixCache._demote")
def test_write_back_backs_a_node_up_when_it_is_evicted_and_drops_it_when_the_host_is_full():
    t = Tree("write_back", host_pages=16)
    x, y = [1, 2, 3, 4], [5, 6, 7, 8]
    t.insert(x)
    t.insert(x + y)
    assert t.backed == [], "write-back copies nothing at insert"
    t.tree.evict(8)
    assert t.backed == [y, x], f"write-back backs each evicted node up, leaf first: got {t.backed}"
    assert t.tree.tier_sizes()["host_only_tokens"] == 8, "both nodes stay, host-only (a dirty node is never lost)"
    t.check()
    _, _, host = t.tree.match_tiers(x + y + [9, 9])
    assert host is not None and host.cached_len == 8, "the whole prefix is found on the host"

    small = Tree("write_back", host_pages=1)  # room for one page of the two
    small.insert(x)
    small.tree.evict(4)
    assert small.tree.cached_slots().numel() == 0 and small.tree.tier_sizes()["host_only_tokens"] == 0, \
        "a node the host cannot take leaves the tree"
    small.check()


@pytest.mark.stubs("HiRadixCache._demote")
def test_the_host_pool_evicts_its_least_recently_used_host_only_leaves_and_never_a_locked_one():
    t = Tree("write_through", host_pages=4)  # 8 host slots
    a, b, c, d = [1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3], [4, 4, 4, 4]
    t.insert(a)
    t.insert(b)
    t.tree.evict(8)  # both host-only, the host pool full
    t.tree.match_tiers(a)  # a is used: b is now the least recently used
    t.insert(c)  # its backup needs 4 host slots: b goes
    assert t.backed[-1] == c and t.tree.host_evicted_tokens == 4, "the host pool made room for c's backup"
    assert t.tree.match_tiers(b)[2] is None and t.tree.match_tiers(a)[2].cached_len == 4, \
        "the least recently used host-only leaf (b) was dropped, a kept"
    t.check()
    _, _, hit = t.tree.match_tiers(a)
    t.tree.lock_handle(hit)  # a request is about to load a: its host pages must stay
    t.insert(d)  # no host room: a is locked, c is on the device
    assert t.backed[-1] != d and not t.tree.match_tiers(d)[0].node.backed_up, \
        "with nothing evictable on the host the new leaf stays on the device only"
    assert t.tree.match_tiers(a)[2] is not None, "a locked host-only node keeps its host pages"
    t.tree.lock_handle(hit, unlock=True)
    t.check()


@pytest.mark.stubs("HiCacheManager.load_back", "HostKVPool.copy_pages")
def test_load_back_gives_the_host_part_new_device_pages_and_copies_its_kv_into_them():
    """A tree built by hand (write-back: nothing is copied at insert): 4 tokens on the device, then 8 on the host only,
    as a write-back eviction leaves them. Loading the host part back gives it device pages holding the host's KV."""
    llm = make_llm("write_back")
    sched = llm.scheduler
    hicache, tree, cache, pool = sched.hicache, sched.hicache.tree, sched.cache_manager, llm.engine.kv_cache
    ids = list(range(1, 13))
    first = cache.allocate_slots(4)
    head = tree.insert_prefix(ids[:4], first)[1].node
    existed, whole = tree.insert_prefix(ids, torch.cat([first, cache.allocate_slots(8)]))
    leaf = whole.node
    assert existed == 4 and leaf.parent is head
    host_slots = hicache.host_pool.alloc(8)
    kv = torch.randn(hicache.host_pool.buffer[:, :, host_slots].shape)
    hicache.host_pool.buffer[:, :, host_slots] = kv
    cache.free(leaf.value)  # the leaf leaves the device, its KV on the host: what a write-back eviction does
    tree._evictable -= len(leaf)
    leaf.value, leaf.host_value = None, host_slots
    tree.check_integrity()
    device, host = CacheHandle(4, head), CacheHandle(12, leaf)
    tree.lock_handle(host)  # admission locks the whole match first
    handle, got = hicache.load_back(device, host)
    assert handle.cached_len == 12 and got[:4].tolist() == head.value.tolist(), \
        "the whole match comes back, its device part's slots first"
    assert leaf.on_device and got[4:].tolist() == leaf.value.tolist(), "the host part got device pages of its own"
    assert leaf.backed_up and leaf.host_value.tolist() == host_slots.tolist(), "the host copy stays"
    for layer in range(pool.num_layers):
        assert torch.equal(pool.k_cache(layer)[leaf.value.long()], kv[0, layer]), f"layer {layer}: keys loaded"
        assert torch.equal(pool.v_cache(layer)[leaf.value.long()], kv[1, layer]), f"layer {layer}: values loaded"
    assert leaf.ref_count == 2, f"the request's lock and the copy's own: {leaf.ref_count} locks"
    assert hicache.stats["loaded_tokens"] == 8
    hicache.flush()
    tree.lock_handle(host, unlock=True)
    assert tree.protected_size == 0 and tree.evictable_size == 12, "once the copy is done nothing stays locked"
    tree.check_integrity()


# --- whole runs ---------------------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def radix_only() -> tuple[list[list[int]], list[int]]:
    """The alternating sessions on the radix cache alone (no host tier): HF's answers, and what it found cached."""
    outputs, hits = run_one_by_one(make_llm(None), alternating())
    assert_hf(alternating(), outputs, "radix only")
    return outputs, hits


@pytest.mark.stubs(*ALL)
@pytest.mark.parametrize("policy", POLICIES)
def test_answers_equal_hf_after_the_shared_prefix_went_to_the_host_and_back(policy):
    """Two sessions take turns on a device pool that holds one: the radix cache alone finds nothing, the host tier
    finds every prefix a cache with unlimited room would, loading it back before the prefill."""
    prompts = alternating()
    outputs, hits = radix_only()
    want = unlimited_radix_hits(prompts, outputs)
    assert sum(hits) < sum(want), f"the fixture must overflow the device pool: radix alone found {hits} of {want}"
    llm = make_llm(policy)
    got, hits = run_one_by_one(llm, prompts)
    assert_hf(prompts, got, policy)
    assert hits == want, f"{policy}: cached tokens per request {hits}, a radix cache with unlimited room finds {want}"
    status = llm.scheduler.status()
    assert status["loaded_tokens"] > 0 and status["h2d_bytes"] > 0, f"{policy}: nothing was loaded back: {status}"
    assert status["copies_in_flight"] == 0, "every copy is done once the engine is idle"
    assert_clean(llm)


@pytest.mark.stubs(*ALL)
@pytest.mark.parametrize("policy", POLICIES)
def test_integrity_under_pressure_many_requests_in_random_order_overflowing_both_pools(policy):
    """16 requests over three system prompts at once, in random order, overlap on, a host pool of SGLang's default size
    (twice the device pool), which overflows too (its LRU runs): HF's answers, and both tiers' pages and every lock
    exact after each step."""
    rng = random.Random(28)
    systems, tok = system_prompts(), tokenizer(NAME)
    words = " ".join(TEXTS + CHAT).split()
    prompts = [systems[rng.randrange(3)] + tok.encode(" ".join(rng.sample(words, 3)))[: rng.randint(2, 9)]
               for _ in range(16)]
    llm = make_llm(policy, overlap=True, ratio=2.0)
    sched = llm.scheduler
    for uid, prompt in enumerate(prompts):
        sched.add_request(PendingReq(uid, torch.tensor(prompt, dtype=torch.int32), greedy()))
    sched.run_until_idle(sched.check_integrity)
    outputs = [sched.take_finished(uid).output_ids for uid in range(len(prompts))]
    assert_hf(prompts, outputs, f"{policy} under pressure")
    status = sched.status()
    assert status["loaded_tokens"] > 0 and status["host_evicted_tokens"] > 0, \
        f"the fixture must load from the host and overflow it: {status}"
    assert_clean(llm)


@pytest.mark.stubs(*ALL)
def test_an_abort_while_a_load_is_in_flight_frees_the_request_and_keeps_the_host_copy():
    s1, s2 = system_prompts()[:2]
    q = questions()
    llm = make_llm("write_through", overlap=True)
    sched = llm.scheduler
    run_one_by_one(llm, [s1 + q[0], s2 + q[1]])  # s1's prefix is on the host only now
    sched.add_request(PendingReq(100, torch.tensor(s1 + q[2], dtype=torch.int32), greedy()))
    data = sched.overlap_step(None)  # admitted: s1 loaded back into fresh pages, its prefill launched
    loads = [op for op in sched.hicache.in_flight if not op.to_host]
    assert len(loads) == 1, f"the admission launched one load, in flight: {sched.hicache.in_flight}"
    nodes = sched.hicache.tree._path(loads[0].node)
    sched.check_integrity()
    assert sched.abort_request(100)
    sched.check_integrity()
    # Pressure while the copy is in flight: every device page the cache can give back, taken.
    cache = sched.cache_manager
    cache.free(cache.prefix_cache.evict(cache.prefix_cache.evictable_size))
    assert all(n.on_device for n in nodes), \
        "a node whose load is in flight lost its device pages (the copy must hold a lock on it until it is done)"
    assert all(n.backed_up for n in nodes), "a load keeps the host copy: it is still valid"
    sched.check_integrity()
    sched.overlap_step(data)  # the aborted request's batch is processed (and skipped); the load retires
    sched.run_until_idle()
    assert 100 not in sched.finished, "an aborted request never finishes"
    assert_clean(llm)
    outputs, hits = run_one_by_one(llm, [s1 + q[3]])
    assert_hf([s1 + q[3]], outputs, "after the abort")
    assert hits[0] >= 40, f"the next turn of the session finds its system prompt cached (got {hits[0]} tokens)"
    assert_clean(llm)


@pytest.mark.stubs(*ALL)
def test_a_node_being_written_to_the_host_keeps_its_device_pages_until_its_copy_is_done():
    """Write-through launches the copy when a prompt is cached (after its prefill); on a GPU the copy reads the device
    pages later, so until it is polled as done its node must not be evicted, even with nothing else running."""
    s1, q = system_prompts()[0], questions()
    llm = make_llm("write_through")
    sched = llm.scheduler
    sched.add_request(PendingReq(7, torch.tensor(s1 + q[0], dtype=torch.int32), SamplingParams(max_tokens=1)))
    sched.step()  # its prefill, its one token, finished: the prompt's pages cached and the copy launched
    writes = [op for op in sched.hicache.in_flight if op.to_host]
    assert writes and all(op.node is not None for op in writes), "each write-through copy holds its node"
    sched.check_integrity()
    cache = sched.cache_manager
    cache.free(cache.prefix_cache.evict(cache.prefix_cache.evictable_size))
    assert all(op.node.on_device for op in writes), "a node lost its device pages while its copy was in flight"
    sched.run_until_idle()
    assert not sched.hicache.in_flight and sched.cache_manager.prefix_cache.protected_size == 0, \
        "once idle every copy is done and its lock given back"
    assert_clean(llm)


@pytest.mark.stubs(*ALL)
def test_the_integrity_check_catches_a_leaked_lock_and_a_leaked_host_page():
    llm = make_llm("write_through")
    run_one_by_one(llm, alternating()[:3])
    tree = llm.scheduler.hicache.tree
    node = next(n for n in tree._nodes() if n.backed_up and n.on_device)  # loaded back: on both tiers
    tree.lock_handle(CacheHandle(len(node), node))  # a lock no request and no copy holds
    with pytest.raises(AssertionError, match="locks"):
        llm.scheduler.check_integrity()
    tree.lock_handle(CacheHandle(len(node), node), unlock=True)
    llm.scheduler.check_integrity()
    node.host_value = None  # forgets its host pages without freeing them
    with pytest.raises(AssertionError, match="host KV pages leaked"):
        llm.scheduler.check_integrity()


# --- configuration ------------------------------------------------------------------------------------------------

def test_the_host_tier_is_off_by_default():
    assert SchedulerConfig().enable_hierarchical_cache is False
    assert make_llm(None).scheduler.hicache is None


@pytest.mark.parametrize("field, value", [("hicache_ratio", 0), ("hicache_ratio", -1.5), ("hicache_ratio", "2"),
                                          ("hicache_size", -1), ("hicache_size", 1.5),
                                          ("hicache_write_policy", "write_around"),
                                          ("hicache_write_policy", "write_through_selective"),
                                          ("enable_hierarchical_cache", "yes")])
def test_bad_settings_are_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SchedulerConfig(**{field: value})


def test_the_host_tier_needs_the_radix_cache_and_a_host_page():
    with pytest.raises(ValueError, match="radix"):
        make_llm("write_through", cache_type="naive")
    with pytest.raises(ValueError, match="at least one"):
        make_llm("write_through", ratio=0.01)


def test_the_server_flags_reach_the_scheduler_config():
    from minisgl.server.args import parse_args

    base = ["--model", str(model_path(NAME))]
    config = parse_args(base).scheduler_config
    assert config.enable_hierarchical_cache is False and config.hicache_ratio == 2.0, "off by default, ratio 2.0"
    config = parse_args(base + ["--enable-hierarchical-cache", "--hicache-ratio", "3.5", "--hicache-size", "2",
                                "--hicache-write-policy", "write_back"]).scheduler_config
    assert (config.enable_hierarchical_cache, config.hicache_ratio, config.hicache_size,
            config.hicache_write_policy) == (True, 3.5, 2, "write_back")
    with pytest.raises(SystemExit):
        parse_args(base + ["--hicache-write-policy", "write_through_selective"])


# --- the GPU -------------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.stubs(*ALL)
@pytest.mark.parametrize("policy", POLICIES)
def test_on_the_gpu_pinned_host_memory_and_copies_on_a_side_stream(policy):
    """CUDA, float32, overlap on: the host pool is pinned, the copies go through the side stream, and the answers
    are HF greedy's with every prefix found as a cache with unlimited room would."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    prompts = alternating()
    llm = make_llm(policy, overlap=True, device="cuda", dtype="float32")
    hicache = llm.scheduler.hicache
    assert hicache.host_pool.buffer.is_pinned() and hicache.copy_stream is not None
    outputs, hits = run_one_by_one(llm, prompts)
    assert_hf(prompts, outputs, f"{policy} on the GPU")
    assert hits == unlimited_radix_hits(prompts, outputs), f"{policy} on the GPU: cached tokens per request {hits}"
    assert hicache.stats["loaded_tokens"] > 0 and all(v > 0 for v in hicache.bandwidth().values()), \
        f"copies both ways, timed: {hicache.status()} {hicache.bandwidth()}"
    assert_clean(llm)
