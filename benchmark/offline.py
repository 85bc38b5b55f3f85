"""The offline row of `make bench-serve`: the online benchmark's requests run through the engine itself (`LLM`),
with the server's own engine and scheduler settings, in a process of its own (its GPU memory is given back before
the server starts).

What the server adds to the engine is what the two rows differ by: every request all at once, no HTTP, no
tokenizer process, no messages. The protocol is the offline benchmark's (benchmark/runs.py): one whole run thrown
away, then timed runs; each run starts with an empty prefix cache.
"""

from __future__ import annotations

import multiprocessing as mp
import shlex
import time


def _one_run(llm, workload: list[tuple[list[int], int]]) -> dict:
    """One run of the workload by the offline benchmark's own driver (chapter 22: an empty prefix cache, every
    request queued at t = 0, the integrity check at the end), reduced to what the online rows report."""
    from minisgl.benchmark.driver import _run_once
    from minisgl.benchmark.metrics import request_latencies

    cpu = time.process_time()
    run = _run_once(llm, workload, "offline", None, llm.scheduler.config.max_extend_tokens, llm.engine.device)
    cpu = time.process_time() - cpu
    lat = [request_latencies(t) for t in run.traces]
    tokens = sum(t.tokens for t in run.traces)
    # the CPU time of the engine's one process per output token: what the server's scheduler process spends
    # beyond it is the price of serving
    return {"wall_s": run.wall_s, "output_tokens": tokens, "output_tok_s": tokens / run.wall_s,
            "cpu_us_per_token": 1e6 * cpu / tokens if tokens else None,
            "ttft_s": [a for a, _ in lat if a is not None], "tpot_s": [b for _, b in lat if b is not None],
            "itl_s": [b - a for t in run.traces for a, b in zip(t.token_times, t.token_times[1:])]}


def _child(model: str, server_args: str, workload, runs: int, queue) -> None:
    try:
        from minisgl.llm import LLM
        from minisgl.server.args import parse_args

        args = parse_args(["--model", model, *shlex.split(server_args)])
        llm = LLM(model, scheduler_config=args.scheduler_config, **args.engine_args)
        _one_run(llm, workload)  # warm-up: thrown away
        queue.put(("ok", [_one_run(llm, workload) for _ in range(runs)]))
    except BaseException as e:  # the parent reports it; the benchmark goes on without the row
        queue.put(("error", f"{type(e).__name__}: {e}"))


def offline_runs(model: str, server_args: str, workload: list[tuple[list[int], int]], runs: int,
                 timeout: float = 1800) -> list[dict]:
    """`runs` timed runs of the workload (prompt ids, max_tokens; EOS ignored) through LLM configured as the
    server would be by `server_args`, after one untimed run: each run's wall time, output tokens and rate, and
    every request's TTFT and TPOT and every gap between two tokens (seconds). Raises RuntimeError with the
    child's error."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(model, server_args, workload, runs, queue), daemon=True)
    proc.start()
    try:
        status, value = queue.get(timeout=timeout)
    except Exception as e:
        raise RuntimeError(f"the offline run gave no result within {timeout:.0f} s (exit code {proc.exitcode})") from e
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    if status != "ok":
        raise RuntimeError(f"the offline run failed: {value}")
    return value
