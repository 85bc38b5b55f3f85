"""GPU probe for chapter 30: the weight-only INT8 Triton kernel against bfloat16 weights, one linear layer at a time.

    PYTHONPATH=$(python -m tools.course tree 30 --sol):. python -m benchmark.probes.int8_mm_probe

For each linear layer shape of Qwen3-0.6B (fused q/k/v, o, fused gate/up, down) and 1 and 8 rows, the time of one
multiply replayed in a CUDA graph (20 per graph, as a decode step replays them): bfloat16 `F.linear`, the course's
kernel (`int8_mm_triton`, the blocks it picks printed), and the dense fallback (codes cast to bfloat16, then scaled).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SHAPES = {"qkv": (4096, 1024), "o": (1024, 2048), "gate_up": (6144, 1024), "down": (1024, 3072)}  # (out, in)


def graph_time_us(fn, calls: int = 200, per_graph: int = 20) -> float:
    """Microseconds per call of fn, replayed from a CUDA graph of per_graph calls."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per_graph):
            fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls // per_graph):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls * 1000


def main() -> None:
    from minisgl.kernel.triton.int8_mm import _blocks, int8_mm_triton
    from minisgl.quant.int8 import quantize_int8_per_channel

    print(f"{torch.cuda.get_device_name()}; microseconds per multiply")
    print("| layer | rows | bfloat16 | INT8 kernel | INT8 dense | kernel blocks (m, n, k, splits) |\n|---|---|---|---|---|---|")
    for name, (out_features, in_features) in SHAPES.items():
        w = torch.randn(out_features, in_features, device="cuda").bfloat16()
        q, scale = quantize_int8_per_channel(w)
        for rows in (1, 8):
            x = torch.randn(rows, in_features, device="cuda").bfloat16()
            bf16 = graph_time_us(lambda: F.linear(x, w))
            kernel = graph_time_us(lambda: int8_mm_triton(x, q, scale))
            dense = graph_time_us(lambda: F.linear(x, q.to(x.dtype)) * scale.to(x.dtype))
            print(f"| {name} {out_features}x{in_features} | {rows} | {bf16:.1f} | {kernel:.1f} | {dense:.1f} | "
                  f"{_blocks(rows, out_features, in_features)} |")


if __name__ == "__main__":
    main()
