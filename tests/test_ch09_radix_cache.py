"""Chapter 9: the radix prefix cache (match, insert, node split, locks, LRU eviction) and the engine on it."""

from __future__ import annotations

import random

import pytest
import torch

from helpers import assert_clean, hf_greedy, model_path, prompt_ids, tokenizer
from minisgl.core import Req, SamplingParams
from minisgl.kvcache.prefix_cache import CacheHandle
from minisgl.kvcache.radix_cache import RadixCache, RadixNode
from minisgl.llm import LLM
from minisgl.scheduler.cache import CacheManager

TREE_STUBS = ("RadixCache._split", "RadixCache._walk", "RadixCache.insert_prefix")
ALL_STUBS = (*TREE_STUBS, "RadixCache.lock_handle", "RadixCache.evict", "CacheManager.cache_req")



def slots(start: int, n: int) -> torch.Tensor:
    return torch.arange(start, start + n, dtype=torch.int32)


def hand_built(page_size: int, paths: list[tuple[list[int], int]]) -> RadixCache:
    """A tree put together node by node (no _walk / insert_prefix). Each (key, first slot) becomes a node
    under the node made just before it, or under the root if its key starts with -1 (the marker is dropped)."""
    tree = RadixCache(page_size=page_size)
    last = tree.root
    for key, first_slot in paths:
        parent = tree.root if key[0] == -1 else last
        key = key[1:] if key[0] == -1 else key
        last = RadixNode(key, slots(first_slot, len(key)), parent)
        parent.children[tuple(key[:page_size])] = last
        tree._evictable += len(key)
    return tree


@pytest.mark.stubs("RadixCache._split")
def test_split_keeps_the_path_and_the_locks():
    tree = hand_built(2, [([-1, 1, 2, 3, 4, 5, 6], 10)])
    node = tree.root.children[(1, 2)]
    node.ref_count, node.last_access = 2, 7
    head = tree._split(node, 4)
    assert tree.root.children[(1, 2)] is head and head.key == [1, 2, 3, 4] and head.value.tolist() == [10, 11, 12, 13]
    assert head.children == {(5, 6): node} and node.parent is head and node.key == [5, 6]
    assert node.value.tolist() == [14, 15] and (head.ref_count, head.last_access) == (2, 7)


@pytest.mark.stubs("RadixCache.lock_handle")
def test_locks_nest_and_move_sizes_between_evictable_and_protected():
    tree = hand_built(1, [([-1, 1, 2], 0), ([3, 4, 5], 2), ([-1, 9], 50)])
    deep = tree.root.children[(1,)].children[(3,)]
    handle = CacheHandle(5, deep)
    tree.lock_handle(handle)
    assert (tree.evictable_size, tree.protected_size) == (1, 5), "the whole path is locked"
    tree.lock_handle(CacheHandle(2, deep.parent))
    assert deep.parent.ref_count == 2 and deep.ref_count == 1
    tree.lock_handle(handle, unlock=True)
    assert (tree.evictable_size, tree.protected_size) == (4, 2), "[1, 2] is still locked by the second handle"
    tree.lock_handle(CacheHandle(2, deep.parent), unlock=True)
    assert (tree.evictable_size, tree.protected_size) == (6, 0)
    with pytest.raises(RuntimeError, match="not locked"):
        tree.lock_handle(handle, unlock=True)
    tree.lock_handle(CacheHandle(0, tree.root))  # an empty match locks nothing
    assert tree.protected_size == 0


@pytest.mark.stubs("RadixCache.evict")
def test_evict_takes_least_recently_used_leaves_then_their_parents():
    tree = hand_built(1, [([-1, 1, 2], 0), ([3], 2), ([-1, 7, 8], 20), ([-1, 5], 30)])
    stamps = {(1,): 1, (7,): 4, (5,): 3}
    for key, node in tree.root.children.items():
        node.last_access = stamps[key]
    tree.root.children[(1,)].children[(3,)].last_access = 2
    tree.root.children[(5,)].ref_count, tree._evictable, tree._protected = 1, 5, 1  # [5] is locked
    assert tree.evict(1).tolist() == [2], "the oldest leaf is [3] (its parent [1, 2] is not a leaf yet)"
    assert sorted(tree.evict(2).tolist()) == [0, 1], "then [1, 2], a leaf now and older than [7, 8]"
    with pytest.raises(MemoryError):
        tree.evict(3)  # only [7, 8] is unlocked
    assert tree.evictable_size == 2 and set(tree.root.children) == {(7,), (5,)}, "a refused eviction takes nothing"


@pytest.mark.stubs(*TREE_STUBS)
def test_match_insert_and_split():
    tree = RadixCache(page_size=1)
    assert tree.insert_prefix([1, 2, 3, 4], slots(100, 4))[0] == 0, "nothing was cached before"
    handle, found = tree.match_prefix([1, 2, 3, 4, 5])
    assert handle.cached_len == 4 and found.tolist() == [100, 101, 102, 103]
    existed, handle = tree.insert_prefix([1, 2, 9, 9], slots(200, 4))  # shares [1, 2]: node [1,2,3,4] splits
    assert existed == 2 and handle.cached_len == 4
    assert tree.match_prefix([1, 2, 9, 9])[1].tolist() == [100, 101, 202, 203], "the shared part keeps its slots"
    assert tree.match_prefix([1, 2, 3, 7])[1].tolist() == [100, 101, 102]
    assert tree.match_prefix([5, 1, 2])[0].cached_len == 0
    root_kids = list(tree.root.children.values())
    assert len(root_kids) == 1 and root_kids[0].key == [1, 2] and len(root_kids[0].children) == 2
    assert tree.evictable_size == 6, "4 + 2 new slots; the duplicated [1, 2] of the second insert is not taken"
    tree.check_integrity()


@pytest.mark.stubs(*TREE_STUBS)
def test_pages_are_never_split():
    tree = RadixCache(page_size=4)
    tree.insert_prefix(list(range(12)), slots(0, 12))
    handle, found = tree.match_prefix(list(range(6)) + [99, 99])
    assert handle.cached_len == 4 and found.tolist() == [0, 1, 2, 3], "6 tokens match: one whole page"
    assert tree.match_prefix(list(range(11)))[0].cached_len == 8, "a partial last page is not matched"
    existed, _ = tree.insert_prefix(list(range(5)) + [50, 51, 52], slots(40, 8))
    assert existed == 4 and tree.match_prefix(list(range(5)) + [50, 51, 52])[1].tolist() == [0, 1, 2, 3, 44, 45, 46, 47]
    with pytest.raises(ValueError, match="whole pages"):
        tree.insert_prefix([1, 2, 3], slots(80, 3))
    tree.check_integrity()


@pytest.mark.stubs(*TREE_STUBS)
@pytest.mark.parametrize("page_size,long", [(1, False), (2, False), (4, False), (1, True), (3, True), (16, True)])
def test_random_inserts_and_matches_agree_with_a_brute_force_oracle(page_size, long):
    """Short sequences of three token values (many splits), and long ones (hundreds of tokens) that share
    a long prefix with one of a few stems and part from it at a random token (long common runs)."""
    rng = random.Random(page_size + 100 * long)
    stems = [[rng.randrange(50) for _ in range(600)] for _ in range(3)]
    tree = RadixCache(page_size=page_size)
    stored: dict[tuple[int, ...], list[int]] = {}  # every cached page (keyed by the prefix it ends) -> its slots
    next_slot = 0
    for _ in range(300):
        if long:
            n = rng.randrange(0, 500 // page_size + 1) * page_size
            cut = rng.randrange(0, n + 1)
            ids = rng.choice(stems)[:cut] + [rng.randrange(50) for _ in range(n - cut)]
        else:
            ids = [rng.randrange(3) for _ in range(rng.randrange(0, 7) * page_size)]
        known = 0  # whole pages the oracle has, in tokens
        while known < len(ids) and tuple(ids[: known + page_size]) in stored:
            known += page_size
        if rng.random() < 0.5:
            existed, handle = tree.insert_prefix(ids, slots(next_slot, len(ids)))
            assert existed == known and handle.cached_len == len(ids)
            for end in range(known + page_size, len(ids) + 1, page_size):
                stored[tuple(ids[:end])] = list(range(next_slot + end - page_size, next_slot + end))
            next_slot += len(ids)
        else:
            handle, found = tree.match_prefix(ids + [7])
            assert handle.cached_len == known
            expected = [s for end in range(page_size, known + 1, page_size) for s in stored[tuple(ids[:end])]]
            assert found.tolist() == expected
    tree.check_integrity()
    assert tree.evictable_size == len(stored) * page_size


@pytest.mark.stubs(*TREE_STUBS, "RadixCache.lock_handle", "RadixCache.evict")
def test_locked_prefixes_survive_and_eviction_is_lru():
    tree = RadixCache(page_size=1)
    tree.insert_prefix([1, 2, 3], slots(0, 3))
    tree.insert_prefix([4, 5], slots(10, 2))
    tree.insert_prefix([6, 7, 8, 9], slots(20, 4))
    tree.match_prefix([4, 5])  # [4, 5] is now the most recently used
    handle, _ = tree.match_prefix([1, 2, 3])
    tree.lock_handle(handle)
    assert (tree.evictable_size, tree.protected_size) == (6, 3)
    tree.lock_handle(handle)  # locks nest
    tree.lock_handle(handle, unlock=True)
    assert tree.protected_size == 3
    assert sorted(tree.evict(1).tolist()) == [20, 21, 22, 23], "least recently used unlocked leaf goes first"
    with pytest.raises(MemoryError):
        tree.evict(3)  # only [4, 5] is unlocked
    tree.lock_handle(handle, unlock=True)
    assert tree.protected_size == 0 and tree.evictable_size == 5
    with pytest.raises(RuntimeError, match="not locked"):
        tree.lock_handle(handle, unlock=True)


@pytest.mark.stubs(*TREE_STUBS, "RadixCache.lock_handle", "RadixCache.evict")
def test_a_split_node_keeps_its_locks_and_parents_go_after_children():
    tree = RadixCache(page_size=1)
    _, handle = tree.insert_prefix([1, 2, 3, 4], slots(0, 4))
    tree.lock_handle(handle)
    tree.insert_prefix([1, 2, 7], slots(10, 3))  # splits the locked node into [1, 2] + [3, 4]
    tree.check_integrity()
    assert tree.protected_size == 4 and tree.evictable_size == 1
    assert tree.evict(1).tolist() == [12]
    tree.lock_handle(handle, unlock=True)
    assert sorted(tree.evict(4).tolist()) == [0, 1, 2, 3], "the emptied parent [1, 2] follows its child [3, 4]"
    assert not tree.root.children


@pytest.mark.stubs(*ALL_STUBS)
@pytest.mark.parametrize("two_copies", [False, True], ids=["cpu-table", "device-and-host-copies"])
def test_cache_req_frees_duplicates_and_repoints_the_row(two_copies):
    """With two_copies, the table stands for a GPU page table and host_table for the cache manager's own copy (on
    a CPU they are one tensor): both must be repointed, and every page freed is read from the host copy."""
    table = torch.zeros(2, 12, dtype=torch.int32)
    cache = CacheManager(num_pages=12, page_size=1, page_table=table, cache_type="radix")
    if two_copies:
        cache.host_table = table.clone()
    reqs = []
    for row in range(2):  # two requests with the same 6-token prompt, prefilled together (neither matched)
        req = Req(torch.tensor([5, 6, 7, 8, 9, 10], dtype=torch.int32), row, 0, 4, row, SamplingParams(max_tokens=4))
        reqs.append(req)
    cache.allocate_paged(reqs)
    for req in reqs:
        req.complete_one()
    first_slots = table[0, :6].clone()
    cache.cache_req(reqs[0], finished=False)
    cache.cache_req(reqs[1], finished=False)
    assert torch.equal(table[1, :6], first_slots), "the second request now reads the cached copy"
    assert torch.equal(cache.host_table, table), "the host copy of the page table agrees with the table"
    assert cache.available_size == 12 - 6, "its own copy was freed: one copy of the prompt is left"
    assert cache.prefix_cache.protected_size == 6
    for req in reqs:
        cache.cache_req(req, finished=True)
    cache.check_integrity()
    assert cache.prefix_cache.evictable_size == 6 and cache.available_size == 12


@pytest.mark.stubs(*ALL_STUBS)
@pytest.mark.parametrize("page_size", [1, 4])
def test_shared_system_prompt_is_computed_once(page_size):
    name = "tiny-qwen3"
    tok = tokenizer(name)
    system = tok.encode("You are a careful assistant. Answer briefly and kindly. ") * 2
    prompts = [system + tok.encode(q) for q in ("Why is the sky blue?", "Name a fruit.", "What is rain?", "Hi!")]
    computed = {}
    for cache_type in ("naive", "radix"):
        llm = LLM(model_path(name), max_running_reqs=4, max_seq_len=256, page_size=page_size, cache_type=cache_type)
        counted = []
        llm.scheduler.on_batch = lambda b: counted.extend(r.extend_len for r in b.reqs if b.is_prefill)
        params = SamplingParams(max_tokens=6, ignore_eos=True)
        outputs = llm.generate(prompts[:1], params) + llm.generate(prompts[1:], params)
        for prompt, out in zip(prompts, outputs):
            assert out["token_ids"] == hf_greedy(name, prompt, 6), cache_type
        computed[cache_type] = sum(counted)
        assert_clean(llm)
    shared = len(system) - len(system) % page_size
    assert computed["naive"] == sum(len(p) for p in prompts)
    assert computed["radix"] <= computed["naive"] - 3 * shared, "the three later requests reuse the system prompt"


@pytest.mark.stubs(*ALL_STUBS)
def test_eviction_under_pressure_still_matches_hf():
    name = "tiny-llama"
    prompts = prompt_ids(name, 4)
    need = max(len(p) for p in prompts) + 8
    llm = LLM(model_path(name), max_running_reqs=2, max_seq_len=128, num_pages=need + 4)
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    for round_ in range(2):  # the second round finds the cache full of the first round's prefixes
        outputs = llm.generate(prompts, params)
        for prompt, out in zip(prompts, outputs):
            assert out["token_ids"] == hf_greedy(name, prompt, 8)
        assert_clean(llm)
    assert llm.scheduler.cache_manager.prefix_cache.evictable_size > 0, "finished requests left their KV in the cache"


@pytest.mark.stubs(*ALL_STUBS)
def test_smollm2_chat_turns_reuse_the_conversation():
    name = "smollm2"
    tok = tokenizer(name)
    llm = LLM(model_path(name), max_running_reqs=2, max_seq_len=512)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    params = SamplingParams(max_tokens=24)
    counted = []
    llm.scheduler.on_batch = lambda b: counted.extend((r.cached_len, r.extend_len) for r in b.reqs if b.is_prefill)
    for turn in range(2):
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        out = llm.generate([ids], params)[0]
        assert out["token_ids"] == hf_greedy(name, list(ids), 24, stop_at_eos=True)
        messages += [{"role": "assistant", "content": tok.decode(out["token_ids"], skip_special_tokens=True)},
                     {"role": "user", "content": "And of Italy?"}]
    assert counted[0][0] == 0 and counted[1][0] >= len(ids) // 2, "the second turn starts from the first turn's KV"
    assert_clean(llm)


@pytest.mark.stubs(*TREE_STUBS)
def test_a_match_touches_every_node_on_its_path():
    """LRU reads last_access: a prefix that is matched again is recently used all along its path, not only at
    its last node (the parent [1, 2] below is the shared part that every later request reuses)."""
    tree = RadixCache(page_size=1)
    tree.insert_prefix([1, 2, 3, 4], slots(0, 4))
    tree.insert_prefix([1, 2, 5, 6], slots(10, 4))  # splits: [1, 2] -> {[3, 4], [5, 6]}
    tree.insert_prefix([9], slots(20, 1))
    other = tree.root.children[(9,)]
    tree.match_prefix([1, 2, 3, 4])
    shared = tree.root.children[(1,)]
    for node in (shared, shared.children[(3,)]):
        assert node.last_access > other.last_access, (
            f"node {node.key} on the path of the match [1, 2, 3, 4] has last_access {node.last_access}, not newer "
            f"than [9] ({other.last_access}), inserted before the match: _walk must stamp every node it passes")


@pytest.mark.stubs(*ALL_STUBS)
@pytest.mark.parametrize("page_size", [1, 4])
def test_a_fully_cached_prompt_computes_its_last_token(page_size):
    """The same prompt twice: the second time the cache holds all of it (the first run cached the prompt and its
    output), yet its last token must still be computed: that forward pass gives the first output token."""
    name = "tiny-qwen3"
    prompt = prompt_ids(name, 4)[3]  # 16 tokens: whole pages of 4, so all of it could be matched
    llm = LLM(model_path(name), max_running_reqs=2, max_seq_len=128, page_size=page_size)
    counted = []
    llm.scheduler.on_batch = lambda b: counted.extend((r.cached_len, r.extend_len) for r in b.reqs if b.is_prefill)
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    for run in ("first", "second"):
        out = llm.generate([prompt], params)[0]
        assert out["token_ids"] == hf_greedy(name, prompt, 4), f"{run} run: got {out['token_ids']}"
        assert_clean(llm)
    reused = (len(prompt) - 1) // page_size * page_size  # whole pages of all but the last token
    assert counted[1] == (reused, len(prompt) - reused), (
        f"second run of a {len(prompt)}-token prompt, page size {page_size}: prefill (cached, computed) = "
        f"{counted[1]}, expected {(reused, len(prompt) - reused)}")
