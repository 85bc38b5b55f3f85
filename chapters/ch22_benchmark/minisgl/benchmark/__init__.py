"""Benchmarking (chapter 22): what the offline benchmark of design section 8 measures, and how.

    workload.py      the nano-vllm workload (256 random prompts, seed 0) and smaller versions of it
    metrics.py       TTFT, TPOT and output tokens/s from per-token timestamps
    roofline.py      bytes and FLOPs a decode step or a whole workload needs at least, and the floor time
    driver.py        our engine on a workload, run after run, every token timestamped (the `ours*` systems)
    random_model.py  a Qwen3-0.6B-shaped model with random weights (nothing downloaded)

The harness that runs it (`make bench`, `make bench-serve`, `make profile`: the peers, the micro-benchmarks,
the report and its plots, the online client, the profile) lives beside the package, in benchmark/ at the
repository root, as mini-sglang keeps its benchmark/ outside python/minisgl: the engine never imports it.
"""
