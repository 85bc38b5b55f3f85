"""Chapter 8 example: the KV pool in pages. Where a request's tokens live, what whole pages cost, and
requests that wait for pages instead of crashing."""

import torch

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.scheduler.utils import PendingReq
from tools.models import model_path_from_env

path = model_path_from_env("tiny-llama")
prompts = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]

print("== page table rows after prefill, page size 4 (a page = 4 consecutive slots)")
llm = LLM(path, max_running_reqs=2, max_seq_len=32, page_size=4, num_pages=6)
sched = llm.scheduler
for uid, ids in enumerate(prompts):
    sched.add_request(PendingReq(uid, torch.tensor(ids, dtype=torch.int32), SamplingParams(max_tokens=4, ignore_eos=True)))
sched.step()  # the prefill batch
for req in sched.decode_manager.running:
    row = llm.scheduler.table_manager.page_table[req.table_idx, : req.cached_len].tolist()
    print(f"  request {req.uid}: {req.cached_len} tokens cached -> slots {row}   pages {sorted({s // 4 for s in row})}")
print(f"  free: {llm.scheduler.cache_manager.available_size // 4} of {llm.scheduler.cache_manager.num_pages} pages")
sched.run_until_idle()
llm.scheduler.check_integrity()
print("  both finished, every page is free again: integrity check passed\n")

print("== what whole pages cost: slots held by 4 requests of 37 positions each")
for page_size in (1, 4, 16, 256):
    held = 4 * (-(-37 // page_size)) * page_size
    print(f"  page size {page_size:>3}: {held:>5} slots for 148 positions ({held - 148:>4} idle in partly filled pages)")

print("\n== a pool with room for one request at a time (page size 4): the others wait, nobody crashes")
llm = LLM(path, max_running_reqs=4, max_seq_len=64, page_size=4, num_pages=5)
outputs = llm.generate([[5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16], [17, 18]],
                       SamplingParams(max_tokens=12, ignore_eos=True))
starts = [(step, uids) for step, (phase, uids) in enumerate(llm.scheduler.history) if phase == "prefill"]
print("  prefill steps:", ", ".join(f"step {s}: request {u[0]}" for s, u in starts))
print(f"  {len(outputs)} requests, {sum(len(o['token_ids']) for o in outputs)} tokens, "
      f"{len(llm.scheduler.history)} steps")
try:
    llm.generate([list(range(1, 15))], SamplingParams(max_tokens=8))
except ValueError as err:
    print(f"  refused up front: {err}")
llm.scheduler.check_integrity()
print("  integrity check passed")
