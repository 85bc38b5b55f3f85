"""Flatten a batch into the tensors a forward pass reads: token ids, positions, KV slots (the offsets of the
attention metadata are attention/base.py's make_metadata)."""

from __future__ import annotations

import torch

from minisgl.core import Batch


def make_positions(batch: Batch, device: torch.device | str) -> torch.Tensor:
    """Position of every new token: request r contributes cached_len .. device_len-1."""
    # TODO(ch05): one arange per request over its extend range, concatenated (int64, on device).
    # >>> solution
    ranges = [torch.arange(r.cached_len, r.device_len) for r in batch.reqs]
    return torch.cat(ranges).to(device, non_blocking=True)
    # <<< solution


def gather_rows(table: torch.Tensor, batch: Batch) -> torch.Tensor:
    """table[row, cached_len:device_len] for every request, concatenated.

    With the token pool this gives the new tokens' ids; with the page table, their KV slots (out_loc).
    """
    # TODO(ch05): slice each request's row over its extend range and concatenate the slices.
    # >>> solution
    return torch.cat([table[r.table_idx, r.cached_len : r.device_len] for r in batch.reqs])
    # <<< solution


def prepare_batch(batch: Batch, token_pool: torch.Tensor, page_table: torch.Tensor) -> None:
    """Fill batch.input_ids, positions and out_loc; the new tokens' slots must already be in the page table."""
    batch.input_ids = gather_rows(token_pool, batch)
    batch.positions = make_positions(batch, token_pool.device)
    batch.out_loc = gather_rows(page_table, batch)
