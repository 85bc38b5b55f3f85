"""Pre-quantized checkpoints for chapter 30, written by compressed-tensors itself (the format llm-compressor writes and
vLLM, SGLang and HF transformers load).

    python -m tools.prequant --model models/tiny-qwen3 --scheme int8wo --out models/prequant/tiny-qwen3-int8wo

The scales are computed here from the model's own weights, with chapter 30's formulas: per output row (or per
tensor) the largest magnitude over 127 (INT8, an all-zero row gets 1) or over 448 (FP8 e4m3). Everything else is
compressed-tensors' work: its QuantizationScheme describes the scheme, apply_quantization_config attaches it to the
HF model's Linear layers, and its ModelCompressor rounds the weights with our scales, packs or casts them, and
writes config.json's quantization_config, so the files are laid out as the field's loaders expect.

Schemes (named after chapter 30's methods): int8wo = W8A16, int 8-bit per-channel weights (compressed-tensors writes
it "pack-quantized": four codes in an int32); fp8 = FP8_DYNAMIC, float 8-bit per-channel weights with dynamic
per-token activations ("float-quantized"); fp8-tensor = the same with one weight scale per tensor. The LM head is
left in the model's dtype (ignore ["lm_head"]), as chapter 30 leaves it.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch

SCHEMES = ("int8wo", "fp8", "fp8-tensor")
INT8_MAX, FP8_MAX = 127.0, 448.0


def quantization_scheme(scheme: str):
    """compressed-tensors' description of one of the schemes (targets: every Linear layer)."""
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    if scheme == "int8wo":
        weights = QuantizationArgs(num_bits=8, type="int", strategy="channel", symmetric=True, dynamic=False)
        return QuantizationScheme(targets=["Linear"], weights=weights)
    strategy = "channel" if scheme == "fp8" else "tensor"
    weights = QuantizationArgs(num_bits=8, type="float", strategy=strategy, symmetric=True, dynamic=False)
    acts = QuantizationArgs(num_bits=8, type="float", strategy="token", symmetric=True, dynamic=True)
    return QuantizationScheme(targets=["Linear"], weights=weights, input_activations=acts)


def weight_scale(weight: torch.Tensor, scheme: str) -> torch.Tensor:
    """Chapter 30's scales in the shape compressed-tensors keeps them: [out, 1] per channel, [1] per tensor."""
    w = weight.detach().float()
    if scheme == "int8wo":
        amax = w.abs().amax(dim=1, keepdim=True)
        return torch.where(amax > 0, amax / INT8_MAX, torch.ones_like(amax))
    amax = w.abs().amax(dim=1, keepdim=True) if scheme == "fp8" else w.abs().amax().reshape(1)
    return (amax / FP8_MAX).clamp(min=1e-12)


def make_prequantized(model: str | Path, out: str | Path, scheme: str, fmt: str | None = None) -> Path:
    """Write `model` (a Hugging Face folder) quantized with `scheme` into `out` (replaced if it exists); `fmt` forces
    compressed-tensors' format ("naive-quantized": INT8 codes as a plain int8 `weight`), else the library picks."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = QuantizationConfig(config_groups={"group_0": quantization_scheme(scheme)}, ignore=["lm_head"])
    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    apply_quantization_config(hf, config)  # each Linear gets its scheme and a weight_scale to fill
    count = 0
    with torch.no_grad():
        for _, module in hf.named_modules():
            if getattr(module, "quantization_scheme", None) is not None and hasattr(module, "weight_scale"):
                module.weight_scale.copy_(weight_scale(module.weight, scheme).to(module.weight_scale.dtype))
                count += 1
    if not count:
        raise ValueError(f"{model}: no Linear layer to quantize")
    compressor = ModelCompressor.from_pretrained_model(hf, quantization_format=fmt)
    compressor.compress_model(hf)  # codes from our scales, packed (INT8) or cast (FP8)
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    hf.save_pretrained(out)
    compressor.update_config(str(out))  # config.json's quantization_config
    AutoTokenizer.from_pretrained(model).save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a Hugging Face model folder (models/tiny-qwen3, models/smollm2)")
    p.add_argument("--scheme", choices=SCHEMES, default="int8wo")
    p.add_argument("--format", default=None, help="force compressed-tensors' format (e.g. naive-quantized)")
    p.add_argument("--out", required=True, help="the folder to write (replaced if it exists)")
    a = p.parse_args(argv)
    print(f"wrote {make_prequantized(a.model, a.out, a.scheme, a.format)}")


if __name__ == "__main__":
    main()
