"""Matrix multiplies on the CPU with each weight packed once for oneDNN (chapter 22's CPU profile).

On a CPU, F.linear in float32 goes to MKL's sgemm, which lays the weight out for its kernels again at every call;
with the few rows of a decode step that costs about as much as the multiply itself (SmolLM2's 30 layers at batch 8:
71 ms of GEMMs per step through F.linear, 37 ms through a packed weight, one thread). oneDNN can reorder a weight
once into the blocked layout its kernels read (prepacking: what vLLM's CPU backend does at load time, and what
torch.compile's freezing does); later calls read it as it is. PackedLinear keeps that packed copy for one layer,
made on the first CPU call and made again if the weight is replaced or changed in place. Everywhere else (CUDA
tensors, a torch without oneDNN, a dtype it refuses, ENABLED switched off) it is F.linear.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

ENABLED = True  # read at every call: the CPU benchmark switches it off to measure plain F.linear
PACKED_DTYPES = (torch.float32, torch.bfloat16)
ONEDNN = torch.backends.mkldnn.is_available()  # asked once: the check sits in every multiply's path


def packing_applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (ENABLED and x.device.type == "cpu" and weight.device.type == "cpu"
            and x.dtype == weight.dtype and x.dtype in PACKED_DTYPES and ONEDNN)


class PackedLinear:
    """y = x W^T (+ b), with W's packed copy kept beside the layer (the layer owns one PackedLinear)."""

    def __init__(self) -> None:
        self._source: weakref.ref | None = None  # the weight the packed copy was made from
        self._version = -1  # ... and its version counter then (an in-place change bumps it)
        self._packed: torch.Tensor | None = None  # None: oneDNN refused this weight, use F.linear

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if not packing_applies(x, weight):
            return F.linear(x, weight, bias)
        if self._source is None or self._source() is not weight or self._version != weight._version:
            self._pack(weight)
        if self._packed is None:
            return F.linear(x, weight, bias)
        rows = x.reshape(-1, x.shape[-1])
        out = torch.ops.mkldnn._linear_pointwise(rows, self._packed, bias, "none", [], "")
        return out.view(*x.shape[:-1], weight.shape[0])

    def _pack(self, weight: torch.Tensor) -> None:
        self._source, self._version = weakref.ref(weight), weight._version
        try:
            self._packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach())
        except RuntimeError:  # this oneDNN build has no kernel for the dtype on this CPU
            self._packed = None
