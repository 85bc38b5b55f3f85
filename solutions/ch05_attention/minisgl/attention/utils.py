"""Flatten a batch into the tensors a forward pass reads: token ids, positions, KV slots, offsets."""

from __future__ import annotations

import torch

from minisgl.attention.base import BaseAttnMetadata
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


def make_metadata(batch: Batch, device: torch.device | str) -> BaseAttnMetadata:
    """Offsets and lengths of the batch: prefix sums of new-token counts (q) and attended lengths (k).

    Built on the CPU, then copied with non_blocking=True: a blocking copy to the GPU waits for everything
    already queued there, which would stall the CPU once per batch (chapter 11 overlaps that time away).
    """
    # TODO(ch05): build cu_seqlens_q from extend lengths and cu_seqlens_k from device lengths (int32, with a
    # leading 0), plus seq_lens, cached_lens, table_idx and the two maxima.
    # >>> solution
    extend = torch.tensor([r.extend_len for r in batch.reqs], dtype=torch.int32)
    seq_lens = torch.tensor([r.device_len for r in batch.reqs], dtype=torch.int32)
    zero = torch.zeros(1, dtype=torch.int32)
    return BaseAttnMetadata(
        cu_seqlens_q=torch.cat([zero, extend.cumsum(0, dtype=torch.int32)]).to(device, non_blocking=True),
        cu_seqlens_k=torch.cat([zero, seq_lens.cumsum(0, dtype=torch.int32)]).to(device, non_blocking=True),
        seq_lens=seq_lens.to(device, non_blocking=True),
        cached_lens=torch.tensor([r.cached_len for r in batch.reqs], dtype=torch.int32).to(device, non_blocking=True),
        table_idx=torch.tensor([r.table_idx for r in batch.reqs], dtype=torch.int64).to(device, non_blocking=True),
        max_seqlen_q=int(extend.max()),
        max_seqlen_k=int(seq_lens.max()),
    )
    # <<< solution


def prepare_batch(batch: Batch, token_pool: torch.Tensor, page_table: torch.Tensor) -> None:
    """Fill batch.input_ids, positions and out_loc; the new tokens' slots must already be in the page table."""
    batch.input_ids = gather_rows(token_pool, batch)
    batch.positions = make_positions(batch, token_pool.device)
    batch.out_loc = gather_rows(page_table, batch)
