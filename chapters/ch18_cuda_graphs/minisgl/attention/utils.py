"""Flatten a batch into the tensors a forward pass reads: token ids, positions, KV slots.

Chapter 18 reads a decode batch with one indexed read per table (its graphs replay many small batches)."""

from __future__ import annotations

import numpy as np
import torch

from minisgl.core import Batch


def make_positions(batch: Batch, device: torch.device | str) -> torch.Tensor:
    """Position of every new token: request r contributes cached_len .. device_len-1."""
    ranges = [torch.arange(r.cached_len, r.device_len) for r in batch.reqs]
    return torch.cat(ranges).to(device, non_blocking=True)


def gather_rows(table: torch.Tensor, batch: Batch) -> torch.Tensor:
    """table[row, cached_len:device_len] for every request, concatenated.

    With the token pool this gives the new tokens' ids; with the page table, their KV slots (out_loc).
    """
    return torch.cat([table[r.table_idx, r.cached_len : r.device_len] for r in batch.reqs])


def prepare_batch(batch: Batch, token_pool: torch.Tensor, page_table: torch.Tensor) -> None:
    """Fill batch.input_ids, positions and out_loc; the new tokens' slots must already be in the page table."""
    if batch.is_decode:
        return _prepare_decode(batch, token_pool, page_table)
    batch.input_ids = gather_rows(token_pool, batch)
    batch.positions = make_positions(batch, token_pool.device)
    batch.out_loc = gather_rows(page_table, batch)


def _prepare_decode(batch: Batch, token_pool: torch.Tensor, page_table: torch.Tensor) -> None:
    """One new token per request: one indexed read of each table (a single host-to-device copy of the
    (row, position) pairs), not a slice and a cat per request."""
    pairs = [v for r in batch.reqs for v in (r.table_idx, r.cached_len)]  # flat, through numpy: the cheapest way
    index = torch.from_numpy(np.array(pairs, dtype=np.int64)).view(-1, 2)
    rows, cols = index.to(token_pool.device, non_blocking=True).unbind(1)
    batch.input_ids = token_pool[rows, cols]
    batch.out_loc = page_table[rows, cols]
    batch.positions = cols
