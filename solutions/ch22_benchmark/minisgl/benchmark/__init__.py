"""Benchmarking and profiling (chapter 22): the offline throughput benchmark of design section 8, and an online one.

    workload.py      the nano-vllm workload (256 random prompts, seed 0) and smaller versions of it
    metrics.py       TTFT, TPOT and output tokens/s from per-token timestamps
    roofline.py      bytes and FLOPs a decode step or a whole workload needs at least, and the floor time
    micro.py         measurements: copy bandwidth, the Triton decode kernel's bandwidth, one decode step
    random_model.py  a Qwen3-0.6B-shaped model with random weights (nothing downloaded)
    systems.py       the systems under test: our engine in several configurations, Hugging Face generate
    bench.py         the command line: run systems, append results to a JSON file
    report.py        the results as a PNG bar chart and a markdown table
    online.py        the online benchmark: a streaming HTTP client with Poisson arrivals against the server
"""
