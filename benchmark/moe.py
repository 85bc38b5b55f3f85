"""Time one MoE layer's experts three ways (torch loop, sorted + grouped torch, Triton fused) against its roofline.

    python -m benchmark.moe --out DIR         # Qwen3-30B-A3B's layer: 128 experts, top-8, hidden 2048,
                                              # expert intermediate 768, bf16, 1..4096 tokens (a GPU)
    python -m benchmark.moe --tiny --out DIR  # a toy layer in float32, for a CPU (Triton only under
                                              # TRITON_INTERPRET=1; its times say nothing about speed)

Writes DIR/moe_bench.json (every measurement, the device, the versions) and DIR/moe_bench.png (time per call
against the number of tokens, with the roofline floor). The routing is random (softmax of Gaussian logits), so
the tokens spread over the experts about evenly, as a trained router's load balancing aims for.

The floor of one call: its weights must be read (every expert some token uses: 3 x hidden x inter numbers
each, plus the tokens in and out), and it does 2 x tokens x top_k x 3 x hidden x inter FLOPs:
    t >= max(bytes / memory bandwidth, FLOPs / peak FLOP rate).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from minisgl.moe import moe_grouped, moe_reference, select_experts

# H200 spec-sheet figures (dense bf16 tensor cores; HBM3e), the defaults on a GPU.
H200_BANDWIDTH, H200_BF16_FLOPS = 4.8e12, 989e12


@dataclass(frozen=True)
class LayerShape:
    experts: int
    top_k: int
    hidden: int
    inter: int


QWEN3_30B_A3B = LayerShape(experts=128, top_k=8, hidden=2048, inter=768)
TINY = LayerShape(experts=8, top_k=2, hidden=64, inter=32)


def fused_available(device: torch.device) -> str | None:
    """Why the Triton path cannot run here, or None when it can."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return "triton is not installed"
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return "CPU tensors need Triton's interpreter (TRITON_INTERPRET=1, set before triton is imported)"
    return None


def methods(device: torch.device) -> dict:
    out = {"loop": moe_reference, "grouped": moe_grouped}
    if fused_available(device) is None:
        from minisgl.moe.fused import fused_moe

        out["fused"] = fused_moe
    return out


def make_layer(shape: LayerShape, tokens: int, dtype: torch.dtype, device: torch.device, seed: int = 0):
    g = torch.Generator(device=device).manual_seed(seed)
    rand = lambda *size, scale: (torch.randn(*size, generator=g, device=device) * scale).to(dtype)  # noqa: E731
    w_gate_up = rand(shape.experts, 2 * shape.inter, shape.hidden, scale=shape.hidden ** -0.5)
    w_down = rand(shape.experts, shape.hidden, shape.inter, scale=shape.inter ** -0.5)
    x = rand(tokens, shape.hidden, scale=1.0)
    logits = torch.randn(tokens, shape.experts, generator=g, device=device)
    weights, ids = select_experts(logits, shape.top_k, renormalize=True)
    return x, w_gate_up, w_down, weights, ids


def time_call(fn, device: torch.device, min_seconds: float = 0.2, max_iters: int = 100) -> float:
    """Seconds per call: warm up, time one call, then time as many as fit in about min_seconds (3 to max_iters)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)  # CUDA calls are queued: wait
    for _ in range(3):
        fn()
    sync()
    start = time.perf_counter()
    fn()
    sync()
    once = time.perf_counter() - start
    iters = max(3, min(max_iters, int(min_seconds / max(once, 1e-6))))
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - start) / iters


def floor(shape: LayerShape, ids: torch.Tensor, itemsize: int, bandwidth: float, flops_rate: float) -> dict:
    tokens = ids.shape[0]
    used = int(torch.unique(ids).numel())
    nbytes = (used * 3 * shape.hidden * shape.inter + 2 * tokens * shape.hidden) * itemsize
    flops = 2 * tokens * shape.top_k * 3 * shape.hidden * shape.inter
    return {"experts_used": used, "bytes": nbytes, "flops": flops,
            "floor_s": max(nbytes / bandwidth, flops / flops_rate),
            "bound": "memory" if nbytes / bandwidth >= flops / flops_rate else "compute"}


def run(shape: LayerShape, token_counts: list[int], dtype: torch.dtype, device: torch.device, bandwidth: float,
        flops_rate: float, check: bool = True) -> list[dict]:
    rows = []
    for tokens in token_counts:
        x, w13, w2, weights, ids = make_layer(shape, tokens, dtype, device, seed=tokens)
        row = {"tokens": tokens, **floor(shape, ids, x.element_size(), bandwidth, flops_rate)}
        want = moe_reference(x.float(), w13.float(), w2.float(), weights, ids) if check else None
        for name, fn in methods(device).items():
            if check:
                got = fn(x, w13, w2, weights, ids).float()
                row[f"{name}_rel_err"] = ((got - want).norm() / want.norm()).item()
            seconds = time_call(lambda: fn(x, w13, w2, weights, ids), device)
            row[f"{name}_s"] = seconds
            row[f"{name}_GBps"] = row["bytes"] / seconds / 1e9
            row[f"{name}_TFLOPs"] = row["flops"] / seconds / 1e12
            row[f"{name}_of_roofline"] = row["floor_s"] / seconds
        rows.append(row)
        print(" ".join([f"{tokens:>5} tokens ({row['bound']}-bound floor {row['floor_s'] * 1e6:8.1f} us):"]
                       + [f"{m} {row[m + '_s'] * 1e6:9.1f} us ({row[m + '_of_roofline']:.0%})"
                          for m in methods(device)]), flush=True)
    return rows


def plot(rows: list[dict], names: list[str], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    tokens = [r["tokens"] for r in rows]
    for name in names:
        ax.plot(tokens, [r[f"{name}_s"] * 1e6 for r in rows], marker="o", label=name)
    ax.plot(tokens, [r["floor_s"] * 1e6 for r in rows], "k--", label="roofline floor")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens in the batch")
    ax.set_ylabel("time per call (us)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmark.moe", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for moe_bench.json and moe_bench.png")
    parser.add_argument("--tiny", action="store_true", help="a toy layer in float32 (for a CPU)")
    parser.add_argument("--tokens", type=int, nargs="*", help="token counts (default: powers of 2 up to 4096, "
                        "or 64 with --tiny)")
    parser.add_argument("--bandwidth", type=float, default=H200_BANDWIDTH, help="bytes/s for the floor")
    parser.add_argument("--flops", type=float, default=H200_BF16_FLOPS, help="FLOP/s for the floor")
    args = parser.parse_args(argv)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape, dtype = (TINY, torch.float32) if args.tiny else (QWEN3_30B_A3B, torch.bfloat16)
    tokens = args.tokens or [2**i for i in range(7 if args.tiny else 13)]
    if device.type != "cuda" and not args.tiny:
        parser.error("the full-size layer needs a CUDA GPU; use --tiny on a CPU")
    if (why := fused_available(device)) is not None:
        print(f"[moe bench] skipping the Triton fused kernel: {why}")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(f"[moe bench] {shape} in {dtype} on {name}; floor from {args.bandwidth / 1e12:.2f} TB/s and "
          f"{args.flops / 1e12:.0f} TFLOP/s")
    rows = run(shape, tokens, dtype, device, args.bandwidth, args.flops)
    names = list(methods(device))
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"device": name, "dtype": str(dtype).removeprefix("torch."), "shape": asdict(shape),
              "bandwidth": args.bandwidth, "peak_flops": args.flops, "methods": names,
              "versions": {"torch": torch.__version__, "triton": _triton_version()}, "rows": rows}
    (args.out / "moe_bench.json").write_text(json.dumps(record, indent=1) + "\n")
    title = (f"one MoE layer ({shape.experts} experts, top-{shape.top_k}, hidden {shape.hidden}, "
             f"inter {shape.inter}, {record['dtype']}) on {name}")
    plot(rows, names, title, args.out / "moe_bench.png")
    print(f"[moe bench] wrote {args.out / 'moe_bench.json'} and {args.out / 'moe_bench.png'}")
    return 0


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


if __name__ == "__main__":
    raise SystemExit(main())
