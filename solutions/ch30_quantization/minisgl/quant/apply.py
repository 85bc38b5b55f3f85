"""quantize_linear_weights: the step the engine runs after loading, turning the model's own weights into 8 bits.

Only the linear layers of the decoder blocks are quantized (attention q/k/v/o and the MLP): they hold nearly all
the bytes a decode step reads. The embedding is a table lookup (no multiply to speed up), and the LM head stays in
the model's dtype as SGLang and vLLM leave it by default: its error lands directly on the logits that pick the
token, and with tied embeddings it shares its tensor with the embedding. MoE experts stay as they are (chapter 20's
grouped compute has no quantized path here).
"""

from __future__ import annotations

from typing import Any, Iterator


def quantizable_layers(op: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted name as in the state dict, layer) of every layer that knows how to quantize itself (it has a
    `quantize` method: the linear layers)."""
    if callable(getattr(op, "quantize", None)):
        yield prefix.rstrip("."), op
    for name, child in op._named_children():
        if hasattr(child, "_named_children"):
            yield from quantizable_layers(child, f"{prefix}{name}.")


def quantize_linear_weights(model: Any, method: str) -> int:
    """Quantize every layer that knows how; returns how many. Layers that hold 8 bits already (loaded from a
    pre-quantized checkpoint) are left as they are."""
    layers = [op for _, op in quantizable_layers(model) if op.weight_scale is None]
    for op in layers:
        op.quantize(method)
    return len(layers)
