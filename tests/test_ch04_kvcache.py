"""Chapter 4: the KV pool, the slot allocator and the page-table rows."""

from __future__ import annotations

import pytest
import torch

from minisgl.kvcache.mha_pool import MHAKVCache
from minisgl.kvcache.naive_cache import NaiveCacheManager
from minisgl.scheduler.table import TableManager


@pytest.mark.stubs("MHAKVCache.store_kv")
def test_store_kv_writes_exactly_the_given_slots():
    cache = MHAKVCache(num_kv_heads=2, head_dim=4, num_layers=3, num_pages=10)
    k = torch.arange(3 * 8, dtype=torch.float32).view(3, 8)  # 3 tokens, 2 heads x 4 dims, flattened
    v = -k
    slots = torch.tensor([7, 2, 5], dtype=torch.int32)
    cache.store_kv(k, v, slots, layer_id=1)
    for token, slot in enumerate(slots.tolist()):
        for name, pool, want in (("k", cache.k_cache(1), k), ("v", cache.v_cache(1), v)):
            got = pool[slot].flatten().tolist()
            assert got == want[token].tolist(), f"layer 1, slot {slot}: {name} holds {got}, expected token {token}'s"
    untouched = [i for i in range(10) if i not in (7, 2, 5)]
    assert cache.k_cache(1)[untouched].abs().sum() == 0, "other slots stay untouched"
    assert cache.k_cache(0).abs().sum() == 0 and cache.k_cache(2).abs().sum() == 0, "other layers too"


@pytest.mark.stubs("MHAKVCache.store_kv")
def test_store_kv_casts_to_the_cache_dtype():
    cache = MHAKVCache(num_kv_heads=1, head_dim=2, num_layers=1, num_pages=4, dtype=torch.bfloat16)
    cache.store_kv(torch.ones(1, 2), torch.ones(1, 2), torch.tensor([3]), 0)
    assert cache.k_cache(0).dtype == torch.bfloat16 and cache.k_cache(0)[3].sum() == 2


def test_pool_shape_and_size():
    cache = MHAKVCache(num_kv_heads=2, head_dim=8, num_layers=4, num_pages=5, page_size=4)
    assert cache.num_slots == 20
    assert cache.bytes_per_slot == 2 * 4 * 2 * 8 * 4
    with pytest.raises(ValueError):
        MHAKVCache(2, 8, 4, num_pages=0)


@pytest.mark.stubs("NaiveCacheManager.allocate", "NaiveCacheManager.free")
def test_allocate_and_free_slots():
    alloc = NaiveCacheManager(8)
    a = alloc.allocate(3)
    b = alloc.allocate(5)
    assert a.dtype == torch.int32 and len(a) == 3 and len(b) == 5
    assert sorted(torch.cat([a, b]).tolist()) == list(range(8)), "slots are distinct and cover the pool"
    assert alloc.available_size == 0
    alloc.free(a)
    assert alloc.available_size == 3
    alloc.free(b)
    alloc.check_integrity()


@pytest.mark.stubs("NaiveCacheManager.allocate")
def test_allocate_too_much_changes_nothing():
    alloc = NaiveCacheManager(4)
    alloc.allocate(3)
    with pytest.raises(MemoryError, match="2 slots requested, 1 free"):
        alloc.allocate(2)
    assert alloc.available_size == 1
    assert len(alloc.allocate(1)) == 1


@pytest.mark.stubs("NaiveCacheManager.allocate", "NaiveCacheManager.free")
def test_double_free_is_caught_and_frees_nothing():
    alloc = NaiveCacheManager(6)
    a = alloc.allocate(4)
    alloc.free(a[:2])
    with pytest.raises(ValueError):
        alloc.free(a[1:3])  # slot a[1] is already free
    assert alloc.available_size == 4, "a refused free gives nothing back"
    with pytest.raises(ValueError):
        alloc.free(torch.tensor([99]))


@pytest.mark.stubs("NaiveCacheManager.free")
def test_freeing_slots_never_allocated_is_refused():
    alloc = NaiveCacheManager(4)
    with pytest.raises(ValueError):
        alloc.free(torch.tensor([0], dtype=torch.int32))
    alloc.check_integrity()


@pytest.mark.stubs("TableManager.free")
def test_freeing_a_row_never_allocated_is_refused():
    table = TableManager.with_new_tables(2, 8)
    with pytest.raises(ValueError):
        table.free(1)
    table.check_integrity()


@pytest.mark.stubs("NaiveCacheManager.allocate")
def test_integrity_check_detects_a_leak():
    alloc = NaiveCacheManager(5)
    alloc.allocate(2)
    with pytest.raises(AssertionError, match="leaked"):
        alloc.check_integrity()


@pytest.mark.stubs("TableManager.allocate", "TableManager.free")
def test_table_rows():
    table = TableManager.with_new_tables(max_running_reqs=3, width=16)
    rows = [table.allocate() for _ in range(3)]
    assert sorted(rows) == [0, 1, 2]
    with pytest.raises(MemoryError):
        table.allocate()
    table.free(rows[1])
    assert table.allocate() == rows[1]
    with pytest.raises(ValueError):
        table.free(7)
    for r in rows:
        table.free(r)
    with pytest.raises(ValueError):
        table.free(rows[0])
    table.check_integrity()


@pytest.mark.stubs("TableManager.allocate", "NaiveCacheManager.allocate", "MHAKVCache.store_kv")
def test_page_table_maps_a_sequence_to_scattered_slots():
    """A request's tokens need not sit in consecutive slots: the page table says where each one is."""
    table, alloc = TableManager.with_new_tables(2, 8), NaiveCacheManager(16)
    cache = MHAKVCache(num_kv_heads=1, head_dim=1, num_layers=1, num_pages=16)
    alloc.allocate(5)  # someone else holds five slots
    row = table.allocate()
    slots = alloc.allocate(4)
    table.page_table[row, :4] = slots
    cache.store_kv(torch.tensor([[10.0], [11.0], [12.0], [13.0]]), torch.zeros(4, 1), slots, 0)
    keys = cache.k_cache(0)[table.page_table[row, :4].long()].flatten()
    assert keys.tolist() == [10.0, 11.0, 12.0, 13.0]
