"""Flatten a batch into the tensors a forward pass reads: token ids, positions, KV slots.

Chapter 18 reads a decode batch with one indexed read per table (its graphs replay many small batches); chapter 26
reads a verify batch the same way, one (row, position) pair per token: a slice and a cat per request would cost a
few operations per row at every step."""

from __future__ import annotations

import numpy as np
import torch

from minisgl.core import Batch


def ints_to_device(values: list[int], dtype: type, device: torch.device | str) -> torch.Tensor:
    """A list of Python ints as a 1-D tensor on `device` (numpy dtype `dtype`), copied without blocking: a
    blocking copy would wait for everything queued on the GPU. numpy builds the array about 3x faster than
    torch.tensor does, which matters for lists built at every step."""
    return torch.from_numpy(np.array(values, dtype=dtype)).to(device, non_blocking=True)


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
    if batch.is_verify:  # chapter 26: flattened when the engine runs it (prepare_verify), unless a graph does it
        return
    batch.input_ids = gather_rows(token_pool, batch)
    batch.positions = make_positions(batch, token_pool.device)
    batch.out_loc = gather_rows(page_table, batch)


def _prepare_decode(batch: Batch, token_pool: torch.Tensor, page_table: torch.Tensor) -> None:
    """One new token per request: one indexed read of each table (a single host-to-device copy of the
    (row, position) pairs), not a slice and a cat per request."""
    pairs = [v for r in batch.reqs for v in (r.table_idx, r.cached_len)]
    rows, cols = ints_to_device(pairs, np.int64, token_pool.device).view(-1, 2).unbind(1)
    batch.input_ids = token_pool[rows, cols]
    batch.out_loc = page_table[rows, cols]
    batch.positions = cols


def prepare_verify(batch: Batch, token_pool: torch.Tensor, page_table: torch.Tensor) -> None:
    """Chapter 26: a few new tokens per request (the last one and its drafts), read as a decode batch is: one indexed
    read of each table with the (row, position) pair of every token. The engine calls it for a verify batch it runs
    eagerly or replays on copied inputs; a verify graph that builds its inputs itself needs none of it (three
    operations less between two verify steps)."""
    pairs = [v for r in batch.reqs for col in range(r.cached_len, r.device_len) for v in (r.table_idx, col)]
    rows, cols = ints_to_device(pairs, np.int64, token_pool.device).view(-1, 2).unbind(1)
    batch.input_ids = token_pool[rows, cols]
    batch.out_loc = page_table[rows, cols]
    batch.positions = cols
