"""Chapter 4 example: three requests share one KV pool; the page table says where each token lives."""

import torch

from minisgl.kvcache.mha_pool import MHAKVCache
from minisgl.kvcache.naive_cache import NaiveCacheManager
from minisgl.scheduler.table import TableManager

pool = MHAKVCache(num_kv_heads=3, head_dim=64, num_layers=30, num_pages=24)  # SmolLM2's shape, 24 slots
alloc = NaiveCacheManager(pool.num_slots)
table = TableManager.with_new_tables(max_running_reqs=3, width=10)
print(f"KV pool: {pool.num_slots} slots x {pool.bytes_per_slot} bytes = {pool.num_slots * pool.bytes_per_slot / 1024:.0f} KiB")

lengths = {"A": 5, "B": 3, "C": 4}
rows = {name: table.allocate() for name in lengths}
filled = {name: 0 for name in lengths}
# Requests grow in turns (prefill, then one token at a time), so their slots interleave in the pool.
for step in range(5):
    for name, n in lengths.items():
        take = n if step == 0 else (1 if filled[name] < n + 3 else 0)
        if take:
            slots = alloc.allocate(take)
            table.page_table[rows[name], filled[name] : filled[name] + take] = slots
            k = torch.full((take, 3 * 64), float(ord(name)))
            for layer in range(pool.num_layers):
                pool.store_kv(k, -k, slots, layer)
            filled[name] += take

print("\npage table (request row -> slot of each token):")
for name in lengths:
    print(f"  {name}: {table.page_table[rows[name], : filled[name]].tolist()}")
owner = ["."] * pool.num_slots
for name in lengths:
    for s in table.page_table[rows[name], : filled[name]].tolist():
        owner[s] = name
print(f"\nthe pool, slot by slot: {''.join(owner)}   ({alloc.available_size} free)")

row_a = rows["A"]
keys = pool.k_cache(7)[table.page_table[row_a, : filled["A"]].long()]
print(f"reading request A's keys of layer 7 through its row: all = {chr(int(keys.unique().item()))}")

for name in lengths:
    alloc.free(table.page_table[rows[name], : filled[name]])
    table.free(rows[name])
alloc.check_integrity()
table.check_integrity()
print("everything freed: integrity check passed")

for model, layers, kv_heads, head_dim in [("SmolLM2-135M", 30, 3, 64), ("Qwen3-0.6B", 28, 8, 128)]:
    per_token = 2 * layers * kv_heads * head_dim * 2
    print(f"{model:<13} bf16 KV per token: {per_token / 1024:.0f} KiB -> a 4096-token request needs "
          f"{per_token * 4096 / 2**20:.0f} MiB")
