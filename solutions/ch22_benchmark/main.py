"""Chapter 22 example: the whole benchmark pipeline, shrunk to seconds on a CPU.

The same code `make bench` runs on a GPU (design section 8; the harness in benchmark/ at the repository root,
over this chapter's minisgl/benchmark/): a nano-vllm-style workload (here 8 requests instead of 256), our
engine in several configurations and Hugging Face `generate` on it, each warmed up by a discarded run of the
whole workload and then timed twice (make bench: three times), with output tokens/s (median, min, max), mean
TTFT and TPOT and the ratio to the workload's roofline floor, then the micro-benchmarks, the markdown table
of the book, the targets and the PNG. On a CPU the numbers only show that the pipeline works: the
model is tiny, the Triton kernel runs in its interpreter, and there are no CUDA graphs to turn off.
"""

import os
import tempfile
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

from benchmark import bench, report  # noqa: E402
from tools.models import model_path_from_env  # noqa: E402

path = model_path_from_env("tiny-qwen3")
systems = ["micro", "ours", "ours-no-graphs", "ours-no-overlap", "ours-torch", "hf-static"]
with tempfile.TemporaryDirectory() as tmp:
    results = Path(tmp) / "results.json"
    code = bench.main(["--device", "cpu", "--quick", "--model", str(path), "--out", str(results),
                       "--runs", "2", "--warmup-runs", "1", "--systems", *systems])
    records = report.load([results])
    print("\n" + report.markdown(records))
    png = report.plot(records, Path(tmp) / "bench.png")
    print(f"PNG: {png.stat().st_size // 1024} KiB, {len(records)} records in the JSON")
digests = {r["system"]: r["output_digest"] for r in records if "output_digest" in r}
same = sorted(name for name, d in digests.items() if d == digests["ours"])
print(f"same output tokens as `ours` (greedy, float32): {', '.join(same)}")
raise SystemExit(code)
