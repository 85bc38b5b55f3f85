"""CUDA graphs for decode: record a decode step once per batch size, then replay it with a single launch.

A decode step of a 28-layer model is hundreds of small kernels. Launched one by one from Python, the GPU
finishes each before the CPU has issued the next, so a step costs what the CPU needs to launch it, whatever
the batch (chapter 17 measured ~25 ms). A CUDA graph records the kernels of one forward pass together with
their arguments, the addresses of every tensor they read and write, and replays all of them with one call.

The price is that a replay reads and writes exactly the memory it was captured with, at the same shapes. So
the runner keeps static buffers (input ids, positions, KV slots, attention metadata; the logits belong to the
graph), captures one graph per size in `capture_sizes`, pads a decode batch to the next captured size with
dummy requests that live in the page table's padding row and write to a KV page no request owns, copies the
padded batch into the static buffers and replays.

Without CUDA (the CPU tests) the same runner uses `EagerGraph`, which reruns the recorded function on the same
static buffers: the padding and the buffer handling are tested, the speed-up is not (there is none on a CPU).
"""

from __future__ import annotations

import bisect
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from minisgl.attention.base import BaseAttnBackend
from minisgl.core import Batch, Context, Req, SamplingParams
from minisgl.models.base import BaseLLMModel


def capture_sizes(max_bs: int) -> list[int]:
    """Batch sizes to capture, ascending: 1, 2, 4, every multiple of 8 below max_bs, and max_bs itself."""
    # TODO(ch18): ValueError if max_bs < 1; sizes up to max_bs only, no duplicates, ascending.
    raise NotImplementedError("TODO(ch18): capture_sizes")


class CudaGraph:
    """One captured forward pass: replay() reruns its kernels on the buffers they were captured with."""

    def __init__(self, forward: Callable[[], torch.Tensor], pool, stream: torch.cuda.Stream) -> None:
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool, stream=stream):
            self.output = forward()  # allocated from the graph's pool: every replay overwrites it

    def replay(self) -> torch.Tensor:
        self.graph.replay()
        return self.output


class EagerGraph:
    """The CPU stand-in for CudaGraph: replay() reruns the function and writes into the same output tensor.

    The function reads the static buffers, as the captured kernels would, so a buffer the runner forgets
    to refresh gives the same wrong answer here as on the GPU.
    """

    def __init__(self, forward: Callable[[], torch.Tensor]) -> None:
        self.forward = forward
        self.output = forward()

    def replay(self) -> torch.Tensor:
        self.output.copy_(self.forward())
        return self.output


@contextmanager
def collector_paused(pause: bool = True) -> Iterator[None]:
    """Collect garbage once, then keep Python's cyclic collector off until the block ends (nothing if not `pause`).

    An engine nobody refers to any more but caught in a reference cycle keeps its CUDA graphs until a collection
    runs, and a collection can start at any allocation: inside a capture it would destroy those graphs while
    another is being recorded, an error that invalidates the capture. (`torch.cuda.graph` collected before each
    capture up to PyTorch 2.8 and no longer does; pytorch/pytorch#161037 tells the story.)"""
    if not pause:
        yield
        return
    gc.collect()
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def padding_request(row: int, length: int) -> Req:
    """A dummy decode request in the padding row: `length` tokens known, the last one being computed."""
    return Req(torch.zeros(length, dtype=torch.int32), table_idx=row, cached_len=length - 1, output_len=1,
               uid=-1, sampling_params=SamplingParams(max_tokens=1))


class GraphRunner:
    """Captures a decode forward pass for each batch size in `sizes` (ascending) and replays them.

    `padding_row` is the page table's row no request owns; `padding_slot` a KV slot no request owns (the engine
    keeps one extra page for it) and `row_width` the page table's width.
    """

    def __init__(self, model: BaseLLMModel, ctx: Context, attn_backend: BaseAttnBackend, sizes: list[int],
                 padding_row: int, padding_slot: int, row_width: int, device: torch.device) -> None:
        if not sizes or sizes != sorted(set(sizes)) or sizes[0] < 1:
            raise ValueError(f"capture sizes must be distinct positive integers in ascending order, got {sizes}")
        self.model, self.ctx, self.attn_backend = model, ctx, attn_backend
        self.sizes = list(sizes)
        self.max_bs = self.sizes[-1]
        self.device = device
        self.padding_req = padding_request(padding_row, 1)
        self.padding_slot = padding_slot
        # Static inputs, the dtypes prepare_batch produces; the graphs read their first `size` entries.
        self.input_ids = torch.zeros(self.max_bs, dtype=torch.int32, device=device)
        self.positions = torch.zeros(self.max_bs, dtype=torch.int64, device=device)
        self.out_loc = torch.full((self.max_bs,), padding_slot, dtype=torch.int32, device=device)
        full = padding_request(padding_row, row_width)
        attn_backend.init_capture_graph(Batch([full] * self.max_bs, "decode"))
        self.graphs: dict[int, CudaGraph | EagerGraph] = {}
        on_cuda = device.type == "cuda"
        self.pool = torch.cuda.graph_pool_handle() if on_cuda else None
        self.stream = torch.cuda.Stream(device) if on_cuda else None
        with torch.inference_mode():
            self.capture()

    def static_batch(self, size: int) -> Batch:
        """A decode batch of `size` padding requests whose tensors are views of the static buffers."""
        batch = Batch([self.padding_req] * size, "decode")
        batch.input_ids, batch.positions = self.input_ids[:size], self.positions[:size]
        batch.out_loc = self.out_loc[:size]
        self.attn_backend.prepare_for_capture(batch)
        return batch

    def _record(self, forward: Callable[[], torch.Tensor]) -> CudaGraph | EagerGraph:
        if self.stream is None:
            return EagerGraph(forward)
        torch.cuda.synchronize(self.device)
        return CudaGraph(forward, self.pool, self.stream)

    def capture_forward(self, batch: Batch) -> Callable[[], torch.Tensor]:
        """What the graph of a static batch records: the model's forward pass on it."""

        def forward() -> torch.Tensor:
            with self.ctx.forward_batch(batch):
                return self.model.forward()

        return forward

    def capture(self) -> None:
        """One graph per size, largest first, so the smaller ones reuse the memory pool the largest sized; no
        garbage collection while the graphs are recorded (collector_paused)."""
        with collector_paused(self.stream is not None):
            for size in reversed(self.sizes):
                forward = self.capture_forward(self.static_batch(size))
                # Warm-up outside the graph: Triton compiles its kernels and lazily made buffers (RoPE tables moved
                # to the GPU) appear now, since nothing may be compiled or allocated outside the pool while capturing.
                forward()
                self.graphs[size] = self._record(forward)

    def can_use(self, batch: Batch) -> bool:
        return batch.is_decode and batch.size <= self.max_bs

    def pad_batch(self, batch: Batch) -> Batch:
        """A new decode batch of the smallest captured size that holds `batch`: its requests, then padding
        requests whose token (id 0 at position 0) writes its key and value to the padding slot."""
        # TODO(ch18): find the size with bisect; the padded batch lists batch.reqs then padding requests, and its
        # input_ids / positions / out_loc are batch's followed by zeros, zeros and the padding slot (same
        # dtypes and device). Leave `batch` unchanged.
        raise NotImplementedError("TODO(ch18): GraphRunner.pad_batch")

    def replay(self, batch: Batch) -> torch.Tensor:
        """Logits [batch.size, vocab] of a prepared decode batch, computed by the graph of its padded size."""
        # TODO(ch18): pad the batch, copy its input_ids, positions and out_loc into the first `size` entries of
        # the static buffers, let the backend copy the metadata (prepare_for_replay), replay the graph of that
        # size and return the rows of the real requests.
        raise NotImplementedError("TODO(ch18): GraphRunner.replay")
