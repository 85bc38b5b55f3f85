"""Probes: one-off measurements behind the numbers of the book's pages, each a module run on its own.

    python -m benchmark.probes.spec_probe --help      # every probe: run from the repository root

    gpu_decode_probe      LLM.generate's tokens/s per attention backend, overlap and CUDA graphs (chapters 11, 17, 18)
    tp_probe              the workload at tp_size 1 and 2, and one all-reduce (chapter 16)
    mixed_probe           mixed prefill + decode batches off and on (chapter 21)
    decode_balance_probe  the decode kernel on equal and on spread contexts, in batch order or longest first
    decode_tune_probe     memory read bandwidth, and the decode kernel's launch settings per batch size
    overlap_probe         a 28-layer decode step from the engine's kernels: two halves on two streams, variants
    fused_layer_probe     that step with GEMMs carrying their neighbours (norm before, SiLU-and-mul before down)
    gemm_probe            a Triton GEMM against cuBLAS on the decode step's few-row matmuls
    host_probe            where the scheduler loop's host time goes, and its slow iterations
    retract_probe         conservative against optimistic admission under a tight KV pool (chapter 23)
    grammar_probe         what a grammar costs per decode step (chapter 25)
    spec_probe            speculative decoding against plain decoding, by batch size (chapter 26)

The chapter-22 probes (decode_balance to host) are told in the book's performance notes. Like the rest of the
harness, a probe imports the package of whatever tree is first on PYTHONPATH; the package never imports a probe.
"""
