"""Pre-quantized checkpoints in the compressed-tensors format (what llm-compressor writes and vLLM, SGLang and HF
transformers load): the 8-bit weights and their scales go straight into chapter 30's quantized layers.

config.json says how the checkpoint was quantized, in its `quantization_config`: `quant_method` "compressed-tensors",
one entry of `config_groups` whose `targets` are ["Linear"], with `weights` (num_bits, type int or float, strategy
channel or tensor, symmetric) and `input_activations` (null for weight-only; dynamic per-token for FP8 W8A8), and
`ignore`, the layers left in the model's dtype (["lm_head"]). Three schemes are the chapter's own methods:

    weights int 8-bit, channel, no input_activations             -> "int8wo"     (W8A16)
    weights float 8-bit, channel, dynamic per-token activations  -> "fp8"        (FP8 W8A8, FP8_DYNAMIC)
    weights float 8-bit, tensor,  dynamic per-token activations  -> "fp8-tensor"

Anything else (4 bits, group or block scales, zero points, static activation scales, sparsity, transforms, a KV
cache scheme, another quant_method) is refused by name: the engine has no kernel for it.

In the files, a layer `L` of an FP8 scheme holds `L.weight` (float8_e4m3fn) and `L.weight_scale`; an INT8 weight-only
layer is written "pack-quantized": `L.weight_packed` (int32, four 8-bit codes a word, each stored plus 128, the first
code in the lowest byte) and `L.weight_shape`, beside `L.weight_scale`. Scales are [out, 1] per channel, [1] per
tensor. Here they become what chapter 30's layers hold: int8 or FP8 codes [out, in] and float32 scales [out]. A
per-tensor scale is repeated over its weight's rows, so the parts of a merged q/k/v (or gate/up) layer keep their own
scales without requantizing: the product is the same number.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import torch

from minisgl.quant.apply import quantizable_layers

# What each of the chapter's methods reads: the weight's dtype, the weight's strategy, the input activations'.
METHOD_OF = {("int", "channel", None): "int8wo", ("float", "channel", "token"): "fp8",
             ("float", "tensor", "token"): "fp8-tensor"}
CODE_DTYPE = {"int8wo": torch.int8, "fp8": torch.float8_e4m3fn, "fp8-tensor": torch.float8_e4m3fn}
FORMATS = {"int": ("pack-quantized", "naive-quantized"), "float": ("float-quantized", "naive-quantized")}
# The decoder's linear layers, the ones chapter 30 quantizes ("Linear" in the config, less the ignored LM head).
QUANTIZED_LAYERS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
QUANTIZED_LEAVES = ("weight", "weight_packed", "weight_shape", "weight_scale")
SUPPORTED = ("compressed-tensors with one config group targeting Linear: int 8-bit symmetric per-channel weights "
             "without input activations (W8A16, int8wo), or float 8-bit symmetric per-channel or per-tensor weights "
             "with dynamic per-token float 8-bit input activations (FP8 W8A8: fp8, fp8-tensor); ignore ['lm_head']")


def _refuse(field: str, value: Any) -> ValueError:
    return ValueError(f"quantization_config.{field} = {value!r} is not supported; supported: {SUPPORTED}")


def read_quantization_config(model_path: str | Path) -> dict | None:
    """config.json's quantization_config, or None (no config.json, or a checkpoint in the model's dtype)."""
    path = Path(model_path) / "config.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text()).get("quantization_config")


def _check_args(where: str, args: dict, kind: str) -> None:
    """One QuantizationArgs: 8 bits, symmetric, no groups or blocks; static (weights) or dynamic (activations)."""
    want = {"num_bits": 8, "symmetric": True, "dynamic": kind == "activations", "group_size": None,
            "block_structure": None}
    for key, value in want.items():
        if args.get(key, value) != value:
            raise _refuse(f"{where}.{key}", args.get(key))
    if args.get("actorder") not in (None, False):
        raise _refuse(f"{where}.actorder", args["actorder"])


def checkpoint_method(qc: dict) -> str:
    """The chapter's method for a quantization_config, or a ValueError naming the first field it cannot run."""
    if qc.get("quant_method") != "compressed-tensors":
        raise _refuse("quant_method", qc.get("quant_method"))
    for extra in ("sparsity_config", "transform_config", "kv_cache_scheme", "moe_sparsity_config"):
        if qc.get(extra):
            raise _refuse(extra, qc[extra])
    if qc.get("quantization_status", "compressed") != "compressed":
        raise _refuse("quantization_status", qc["quantization_status"])
    groups = qc.get("config_groups") or {}
    if len(groups) != 1:
        raise _refuse("config_groups", sorted(groups))
    (name, group), = groups.items()
    where = f"config_groups.{name}"
    if group.get("targets") != ["Linear"]:
        raise _refuse(f"{where}.targets", group.get("targets"))
    weights, acts = group.get("weights") or {}, group.get("input_activations")
    _check_args(f"{where}.weights", weights, "weights")
    if acts is not None:
        _check_args(f"{where}.input_activations", acts, "activations")
        if acts.get("type") != weights.get("type"):
            raise _refuse(f"{where}.input_activations.type", acts.get("type"))
    if group.get("output_activations") is not None:
        raise _refuse(f"{where}.output_activations", group["output_activations"])
    wtype, strategy = weights.get("type"), weights.get("strategy")
    if wtype not in FORMATS:
        raise _refuse(f"{where}.weights.type", wtype)
    if all(key[:2] != (wtype, strategy) for key in METHOD_OF):
        raise _refuse(f"{where}.weights.strategy", strategy)
    key = (wtype, strategy, None if acts is None else acts.get("strategy"))
    if key not in METHOD_OF:
        raise _refuse(f"{where}.input_activations", acts)
    for fmt in (qc.get("format"), group.get("format")):
        if fmt is not None and fmt not in FORMATS[wtype]:
            raise _refuse("format", fmt)
    if list(qc.get("ignore") or []) != ["lm_head"]:
        raise _refuse("ignore", qc.get("ignore"))
    return METHOD_OF[key]


def checkpoint_quantization(model_path: str | Path) -> str | None:
    """The method a pre-quantized checkpoint was made with; None for a checkpoint in the model's dtype."""
    qc = read_quantization_config(model_path)
    return None if qc is None else checkpoint_method(qc)


def resolve_quantization(model_path: str | Path, flag: str | None) -> str | None:
    """--quantization's value: the checkpoint's method when the flag is left out; a flag that asks for another is
    refused by name (the weights are already 8-bit: quantizing them another way would need the originals)."""
    found = checkpoint_quantization(model_path)
    if found is not None and flag is not None and flag != found:
        raise ValueError(f"quantization {flag!r} conflicts with the checkpoint, which was quantized as {found!r} "
                         f"(compressed-tensors): leave --quantization out or pass {found!r}")
    return found if flag is None else flag


def unpack_int8(packed: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """pack-quantized 8-bit codes: each int32 holds four codes plus 128, the first in bits 0-7; [out, in] int8."""
    shifts = torch.arange(0, 32, 8, dtype=torch.int32)
    codes = (packed.to(torch.int32).unsqueeze(-1) >> shifts) & 0xFF  # [out, words, 4]
    rows, cols = shape
    return (codes.reshape(rows, -1)[:, :cols] - 128).to(torch.int8)


def quantized_tensors(tensors: Iterator[tuple[str, torch.Tensor]],
                      method: str) -> Iterator[tuple[str, torch.Tensor]]:
    """The checkpoint's tensors as chapter 30's layers hold them: `L.weight` codes (unpacked if packed) of the
    method's dtype and `L.weight_scale` float32 [out]. A layer's tensors wait for each other (a per-tensor scale
    needs its weight's rows); tensors of other layers pass unchanged."""
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in tensors:
        layer, _, leaf = name.rpartition(".")
        if layer.rpartition(".")[2] not in QUANTIZED_LAYERS or leaf not in QUANTIZED_LEAVES:
            yield name, tensor  # in the model's dtype: the embedding, the norms, the LM head
            continue
        parts = pending.setdefault(layer, {})
        parts[leaf] = tensor
        if "weight_packed" in parts and "weight_shape" in parts:
            if method != "int8wo":
                raise ValueError(f"{layer}: packed INT codes in a checkpoint whose config says {method!r}")
            parts["weight"] = unpack_int8(parts.pop("weight_packed"), tuple(parts.pop("weight_shape").tolist()))
        if "weight" in parts and "weight_scale" in parts:
            weight, scale = parts["weight"], parts["weight_scale"]
            if weight.dtype != CODE_DTYPE[method]:
                raise ValueError(f"{layer}.weight: {weight.dtype}, but {method!r} stores {CODE_DTYPE[method]}")
            rows = weight.shape[0]
            if scale.numel() == 1 and method == "fp8-tensor":
                scale = scale.reshape(1).expand(rows)
            elif tuple(scale.shape) not in ((rows, 1), (rows,)) or method == "fp8-tensor":
                raise ValueError(f"{layer}.weight_scale: shape {tuple(scale.shape)} does not fit {method!r} "
                                 f"for a weight of {rows} rows")
            yield f"{layer}.weight", weight
            yield f"{layer}.weight_scale", scale.float().reshape(rows).contiguous()
            del pending[layer]
    if pending:
        raise ValueError(f"checkpoint layers without their codes or scales: {sorted(pending)[:5]}")


def place_quantized(model: Any, state: dict[str, torch.Tensor], method: str) -> int:
    """Give every quantizable layer its codes and scales from the checkpoint's (merged) state dict, before the rest
    of the state dict is loaded; returns how many layers. A layer the checkpoint left unquantized is an error."""
    count = 0
    for name, op in quantizable_layers(model):
        weight, scale = state.get(f"{name}.weight"), state.get(f"{name}.weight_scale")
        if weight is None or scale is None:
            raise ValueError(f"{name}: the checkpoint has no quantized weight and weight_scale for it")
        op.quantize(method, weight, scale)
        count += 1
    return count
