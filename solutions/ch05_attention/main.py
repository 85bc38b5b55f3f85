"""Chapter 5 example: a batch flattened into metadata, and paged attention that reuses a cached prefix."""

import torch

from minisgl.attention.torch_backend import TorchAttnBackend
from minisgl.attention.utils import gather_rows, make_positions, prepare_batch
from minisgl.core import Batch, Req, SamplingParams
from minisgl.kvcache.mha_pool import MHAKVCache
from minisgl.kvcache.naive_cache import NaiveCacheManager
from minisgl.scheduler.table import TableManager

g = torch.Generator().manual_seed(0)
HQ, HKV, D = 4, 2, 16
cache, alloc = MHAKVCache(HKV, D, 1, num_pages=64), NaiveCacheManager(64)
table = TableManager.with_new_tables(6, 32)
backend = TorchAttnBackend(cache, table.page_table)


def admit(ids: list[int], cached: int = 0) -> Req:
    row = table.allocate()
    table.token_pool[row, : len(ids)] = torch.tensor(ids)
    return Req(torch.tensor(ids, dtype=torch.int32), row, cached, 4, row, SamplingParams(max_tokens=4))


def give_slots(reqs: list[Req]) -> None:
    slots = alloc.allocate(sum(r.extend_len for r in reqs))
    start = 0
    for r in reqs:
        table.page_table[r.table_idx, r.cached_len : r.device_len] = slots[start : start + r.extend_len]
        start += r.extend_len


alloc.allocate(5)  # someone else holds a few slots, so ours are not simply 0, 1, 2...
prompts = [[11, 12, 13, 14, 15, 16], [21, 22, 23], [31, 32, 33, 34]]
reqs = [admit(p) for p in prompts]
give_slots(reqs)
batch = Batch(reqs, "prefill")
prepare_batch(batch, table.token_pool, table.page_table)
backend.prepare_metadata(batch)
meta = batch.attn_metadata
print("a prefill batch of three requests, flattened:")
print(f"  input_ids    {batch.input_ids.tolist()}")
print(f"  positions    {batch.positions.tolist()}")
print(f"  out_loc      {batch.out_loc.tolist()}")
print(f"  cu_seqlens_q {meta.cu_seqlens_q.tolist()}   (last tokens at {meta.last_indices().tolist()})")

# Prefix reuse: 10 tokens computed at once, or 6 cached first and 4 new later, give the same attention output.
n, cached = 10, 6
q, k, v = (torch.randn(n, h, D, generator=g) for h in (HQ, HKV, HKV))
whole = admit(list(range(n)))
give_slots([whole])
b1 = Batch([whole], "prefill")
b1.out_loc = gather_rows(table.page_table, b1)
backend.prepare_metadata(b1)
out_whole = backend.forward(q, k, v, 0, b1)

later = admit(list(range(n)), cached=cached)
table.page_table[later.table_idx, :cached] = table.page_table[whole.table_idx, :cached]  # borrow the prefix
give_slots([later])
b2 = Batch([later], "prefill")
b2.out_loc = gather_rows(table.page_table, b2)
backend.prepare_metadata(b2)
out_suffix = backend.forward(q[cached:], k[cached:], v[cached:], 0, b2)
diff = float((out_suffix - out_whole[cached:]).abs().max())
print(f"\nprefix reuse: 4 new tokens over 6 cached ones vs 10 at once, positions {make_positions(b2, 'cpu').tolist()}")
print(f"  max |difference| = {diff:.1e}  (the cached keys are the same keys)")
