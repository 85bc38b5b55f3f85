"""Linear layers. The merged variants compute several projections with one matrix multiply.

Under tensor parallelism (chapter 16) each rank holds a slice of every weight. Column-parallel layers (the
merged q/k/v and gate/up projections) hold some output rows: each rank computes its own heads or its own
slice of the MLP's hidden units, and nothing is exchanged. Row-parallel layers (o_proj, down_proj) hold the
matching input columns: each rank computes a partial sum, and one all-reduce adds the partial sums up.

From chapter 22, every multiply goes through the layer's PackedLinear: on a CPU the weight is packed once for
oneDNN (kernel/cpu_gemm.py), elsewhere it is F.linear as before.

Chapter 30: `quantize(method)` replaces the weight by its 8-bit form (`weight` int8 or FP8, `weight_scale` beside
it: the names quantized checkpoints use) and the layer's multiply by the quantized one. The layers' forwards do not
change. Under tensor parallelism each rank quantizes the slice it holds: a scale per output row is the same whether
the rows are cut first (column-parallel), and a row-parallel rank's partial sum is scaled before the all-reduce
adds the partial sums up, so every rank's scales are right for its own slice.

Chapter 31: a layer with LoRA adapters attached (`_lora`, set by the engine's LoraBuffers) adds every token's
adapter delta to the base multiply's output, whatever that multiply is (quantized too): the low-rank path stays in
the model's dtype beside it. The slot of each token comes from the forward context.
"""

from __future__ import annotations

import torch

from minisgl.core import get_global_ctx
from minisgl.distributed import all_reduce, get_tp_info, split_heads
from minisgl.kernel.cpu_gemm import PackedLinear
from minisgl.layers.base import BaseOP
from minisgl.quant import fp8_scale, fp8_linear, int8_linear, quantize_fp8, quantize_int8_per_channel
from minisgl.quant.int8 import probe_cuda_kernel


def divide(n: int, parts: int, what: str) -> int:
    if n % parts:
        raise ValueError(f"{what} ({n}) cannot be split evenly across tp_size {parts}")
    return n // parts


class LinearReplicated(BaseOP):
    """y = x W^T (+ b). Weight shape [out_features, in_features], as in PyTorch and HF checkpoints."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        self.weight = torch.empty(out_features, in_features)
        self.bias = torch.empty(out_features) if bias else None
        self._gemm = PackedLinear()  # private: no weight of its own in the state dict
        self.weight_scale: torch.Tensor | None = None  # chapter 30: set by quantize()
        self._lora = None  # chapter 31: a LoraTarget when adapters may change this layer's output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._with_lora(x, self._gemm(x, self.weight, self.bias))

    def _with_lora(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Chapter 31: y plus each token's LoRA delta (y itself when no adapter is attached or LoRA is off)."""
        if self._lora is None:
            return y
        slots = get_global_ctx().lora_slots
        if slots is None:
            return y
        return self._lora.add_to(y, x, slots[: x.shape[0]])

    def quantize(self, method: str, weight: torch.Tensor | None = None,
                 weight_scale: torch.Tensor | None = None) -> None:
        """Chapter 30: store the weight in 8 bits (method "int8wo", "fp8" or "fp8-tensor") and multiply with it.
        With `weight` and `weight_scale` (a pre-quantized checkpoint's codes and float32 scales [out]) take those as
        they are instead of quantizing the layer's own weight."""
        if self.weight_scale is not None:
            raise ValueError("this layer is quantized already")
        if method not in ("int8wo", "fp8", "fp8-tensor"):
            raise ValueError(f"quantization method must be 'int8wo', 'fp8' or 'fp8-tensor', got {method!r}")
        if weight is not None:
            if tuple(weight.shape) != tuple(self.weight.shape) or tuple(weight_scale.shape) != (weight.shape[0],):
                raise ValueError(f"quantized weight {tuple(weight.shape)} with scales {tuple(weight_scale.shape)} "
                                 f"for a layer of shape {tuple(self.weight.shape)}")
            weight, weight_scale = weight.to(self.weight.device), weight_scale.to(self.weight.device)
        elif method == "int8wo":
            weight, weight_scale = quantize_int8_per_channel(self.weight)
        else:
            weight_scale = fp8_scale(self.weight, per_row=method == "fp8").flatten()
            weight = quantize_fp8(self.weight, weight_scale.reshape(-1, 1) if method == "fp8" else weight_scale)
        self.weight, self.weight_scale = weight, weight_scale
        self._gemm = QuantizedGemm(int8_linear if method == "int8wo" else fp8_linear, self.weight_scale)
        if method == "int8wo" and self.weight.device.type == "cuda":
            probe_cuda_kernel(self.weight.device)


class QuantizedGemm:
    """The multiply of a quantized layer, called as PackedLinear is: (x, weight, bias) -> y, the scale held here."""

    def __init__(self, matmul, scale: torch.Tensor) -> None:
        self.matmul, self.scale = matmul, scale

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return self.matmul(x, weight, self.scale, bias)


class LinearQKVMerged(LinearReplicated):
    """q, k and v projections stacked into one weight: rows [q | k | v], this rank's heads only."""

    def __init__(self, hidden_size: int, head_dim: int, num_qo_heads: int, num_kv_heads: int,
                 bias: bool = False) -> None:
        local_qo, local_kv = split_heads(num_qo_heads, num_kv_heads, get_tp_info().size)
        self.q_size = local_qo * head_dim
        self.kv_size = local_kv * head_dim
        super().__init__(hidden_size, self.q_size + 2 * self.kv_size, bias)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One matmul, then split the result into q, k and v."""
        qkv = super().forward(x)
        return qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)


class LinearColParallelMerged(LinearReplicated):
    """Several projections of the same input stacked row-wise (the MLP's [gate | up]), each cut by rank."""

    def __init__(self, in_features: int, out_features_list: list[int], bias: bool = False) -> None:
        tp = get_tp_info().size
        self.out_features_list = [divide(n, tp, "output features") for n in out_features_list]
        super().__init__(in_features, sum(self.out_features_list), bias)


class LinearRowParallel(LinearReplicated):
    """The MLP down projection: this rank's input columns, partial sums added up across ranks."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        if bias:  # every rank would add it: the sum would hold it tp_size times
            raise ValueError("a row-parallel layer with a bias is not supported")
        super().__init__(divide(in_features, get_tp_info().size, "input features"), out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: this rank's slice of the input features -> the full output, the same on every rank."""
        if get_tp_info().size == 1:
            return self._with_lora(x, self._gemm(x, self.weight))
        return all_reduce(self._gemm(x, self.weight))


class LinearOProj(LinearRowParallel):
    """The attention output projection: row-parallel over this rank's heads."""
