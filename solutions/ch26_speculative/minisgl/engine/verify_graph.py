"""CUDA graphs for verify steps (chapter 26): one captured pass per batch size, every row k + 1 tokens wide.

Run eagerly, a verify step costs what the host needs to launch its kernels one by one: on a GPU several times a
replayed decode step, more than speculation can win back at any acceptance rate. A graph needs fixed shapes, so
here every row of a verify batch is k + 1 tokens wide (its last token and k drafts). A row with fewer drafts, or
none, is padded with tokens whose keys and values go to the padding slot, and the batch is padded to a captured
size with rows of the padding row, as chapter 18 pads a decode batch.

Attention stays exact for every real token. Each row attends as if all k + 1 positions were its own (seq_len =
cached_len + k + 1), so that a kernel which lines the queries up with the last keys (flash-attn's causal rule)
puts query j at position cached_len + j, as the kernels that mask by position do; a real query then sees keys up to
its own position only, all of them real. A padded query reads whatever the page table holds past the row's pages,
and its output is never used.

With a backend that attends a verify row from its table row and length alone (the Triton kernels: the static
metadata carries the rows' width), the graph also builds its own inputs: the host sends each row's (table row,
cached length, tokens to compute) in one copy, and the captured pass reads the tokens from the token pool, the
slots from the page table (the padding slot past a row's real tokens), and makes the positions and lengths, where
an eager replay would issue a dozen small copies before every launch, each waiting on the host while the GPU idles
between two verify steps. Other backends (flash-attn's block tables, the CPU's torch backend) get their inputs and
metadata copied in as before.
"""

from __future__ import annotations

import bisect
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from minisgl.attention.utils import ints_to_device, prepare_verify
from minisgl.core import Batch
from minisgl.engine.graph import GraphRunner

VERIFY_GRAPH_MAX_BS = 64  # speculation pays at small batches (chapter 26 measures where it stops), and every
# captured size keeps its own logits, [size x (k + 1), vocab]: larger sizes would cost memory for nothing


@dataclass
class VerifyRow:
    """What the attention metadata reads of a row (make_metadata): its page-table row and the span it computes."""

    table_idx: int
    cached_len: int
    device_len: int

    @property
    def extend_len(self) -> int:
        return self.device_len - self.cached_len


class VerifyGraphRunner(GraphRunner):
    """Verify batches of up to VERIFY_GRAPH_MAX_BS rows, each row's last token and up to k drafts, replayed from
    graphs captured beside the decode graphs of `decode` (same model, backend, padding row and memory pool)."""

    def __init__(self, decode: GraphRunner, k: int, page_table: torch.Tensor, token_pool: torch.Tensor) -> None:
        self.model, self.ctx, self.attn_backend = decode.model, decode.ctx, decode.attn_backend
        self.device, self.pool, self.stream = decode.device, decode.pool, decode.stream
        self.width = k + 1
        self.page_table, self.token_pool = page_table, token_pool
        row_width = self.row_width = page_table.shape[1]
        self.sizes = [s for s in decode.sizes if s <= VERIFY_GRAPH_MAX_BS] or decode.sizes[:1]
        self.max_bs = self.sizes[-1]
        self.padding_row, self.padding_slot = decode.padding_req.table_idx, decode.padding_slot
        tokens = self.max_bs * self.width
        self.input_ids = torch.zeros(tokens, dtype=torch.int32, device=self.device)
        self.positions = torch.zeros(tokens, dtype=torch.int64, device=self.device)
        self.out_loc = torch.full((tokens,), self.padding_slot, dtype=torch.int32, device=self.device)
        # Static metadata of its own (the decode graphs keep theirs): sized by rows that attend to whole rows.
        full = Batch([VerifyRow(self.padding_row, row_width - self.width, row_width)] * self.max_bs, "verify")
        self.attn_backend.prepare_metadata(full)
        self.metadata = full.attn_metadata
        # Inputs built inside the graph: each row's (table row, cached length, tokens it computes), and the positions
        # 0 .. k of a row as a [1, k + 1] tensor.
        self.on_device = getattr(self.metadata, "width", 0) == self.width
        self.rows_in = torch.zeros(self.max_bs, 3, dtype=torch.int64, device=self.device)
        self.offsets = torch.arange(self.width, device=self.device)[None, :]
        self.graphs = {}
        with torch.inference_mode():
            self.capture()

    @contextmanager
    def _own_metadata(self) -> Iterator[None]:
        """The backend's static metadata is the decode graphs'; while capturing or replaying a verify graph it is
        this runner's."""
        saved, self.attn_backend.graph_metadata = self.attn_backend.graph_metadata, self.metadata
        try:
            yield
        finally:
            self.attn_backend.graph_metadata = saved

    def capture(self) -> None:
        with self._own_metadata():
            super().capture()

    def static_batch(self, size: int) -> Batch:
        """A verify batch of `size` padding rows, k + 1 tokens each, whose tensors are views of the static buffers."""
        batch = Batch([VerifyRow(self.padding_row, 0, self.width)] * size, "verify")
        n = size * self.width
        batch.input_ids, batch.positions, batch.out_loc = self.input_ids[:n], self.positions[:n], self.out_loc[:n]
        self.attn_backend.prepare_for_capture(batch)
        return batch

    def capture_forward(self, batch: Batch):
        """On a backend that builds its inputs on the device (on_device): the graph records build_inputs from the
        rows_in buffer, then the forward pass, so a replay needs one copy of (table row, cached length, width) per
        row. Otherwise the plain forward pass over inputs the host prepared."""
        if not self.on_device:
            return super().capture_forward(batch)
        size = batch.size

        def forward() -> torch.Tensor:
            self.build_inputs(batch, self.rows_in[:size])
            with self.ctx.forward_batch(batch):
                return self.model.forward()

        return forward

    def build_inputs(self, batch: Batch, rows_in: torch.Tensor) -> None:
        """Inside the graph: the static batch's inputs and metadata from each row's (table row, cached length, tokens
        it computes). A row's tokens k + 1 wide at positions cached .. cached + k; past its real tokens the KV goes to
        the padding slot (the page table there may hold another request's pages)."""
        table, cached, extend = rows_in.unbind(1)
        cols = cached[:, None] + self.offsets
        rows = table[:, None].expand_as(cols)
        slots = self.page_table[rows, cols]
        batch.input_ids.copy_(self.token_pool[rows, cols].view(-1))
        batch.positions.copy_(cols.view(-1))
        batch.out_loc.copy_(torch.where(self.offsets < extend[:, None], slots, self.padding_slot).view(-1))
        meta = batch.attn_metadata
        meta.table_idx.copy_(table)
        meta.seq_lens.copy_(cached + self.width)

    def can_use(self, batch: Batch) -> bool:
        """A verify batch that fits a captured size, with room in every page-table row for k + 1 positions."""
        return (batch.is_verify and batch.size <= self.max_bs
                and all(r.cached_len + self.width <= self.row_width and r.extend_len <= self.width for r in batch.reqs))

    def replay(self, batch: Batch) -> torch.Tensor:
        """Logits of every new token of a prepared verify batch, [tokens, vocab] in the batch's order, computed by the
        graph of its padded size."""
        size = self.sizes[bisect.bisect_left(self.sizes, batch.size)]
        w, n = self.width, size * self.width
        # Token j of row i goes to slot i * w + j of the padded layout; the slots left are padding.
        index = [i * w + j for i, r in enumerate(batch.reqs) for j in range(r.extend_len)]
        if self.on_device:  # one copy: the rows (padding rows compute nothing), then the index
            rows = [v for r in batch.reqs for v in (r.table_idx, r.cached_len, r.extend_len)]
            sent = ints_to_device(rows + [self.padding_row, 0, 0] * (size - batch.size) + index, np.int64, self.device)
            self.rows_in[:size].view(-1).copy_(sent[: 3 * size])
            return self.graphs[size].replay().index_select(0, sent[3 * size:])
        if batch.input_ids is None:
            prepare_verify(batch, self.token_pool, self.page_table)
        index = ints_to_device(index, np.int64, self.device)
        self.input_ids[:n].zero_()
        self.positions[:n].zero_()
        self.out_loc[:n].fill_(self.padding_slot)
        self.input_ids.index_copy_(0, index, batch.input_ids.to(self.input_ids.dtype))
        self.positions.index_copy_(0, index, batch.positions.to(self.positions.dtype))
        self.out_loc.index_copy_(0, index, batch.out_loc.to(self.out_loc.dtype))
        rows = [VerifyRow(r.table_idx, r.cached_len, r.cached_len + w) for r in batch.reqs]
        padded = Batch(rows + [VerifyRow(self.padding_row, 0, w)] * (size - batch.size), "verify")
        with self._own_metadata():
            self.attn_backend.prepare_for_replay(padded)
            logits = self.graphs[size].replay()
        return logits.index_select(0, index)
