"""CPU probe for chapters 14 and 22: the scheduler process's host work per output token, apart from the model.

    PYTHONPATH=$(python -m tools.course tree 27 --sol):. python -m benchmark.probes.sched_loop_probe
    python -m benchmark.probes.sched_loop_probe --ab A_TREE B_TREE --rounds 3   # two trees, interleaved

One scheduler on a small model (default models/tiny-qwen3, on the CPU) runs a batch of requests that all arrive at
once (256, prompts of 8-64 random ids, 100-400 output tokens, EOS ignored), in two ways:

- offline: Scheduler.run_until_idle, as LLM.generate runs it;
- serve: SchedulerIO.run_forever, the scheduler process's loop, with in-memory queues in place of the ZMQ sockets:
  every request is received in the first step, and every reply frame is encoded with msgpack as the socket would
  send it (only the socket's own copy is left out).

For each run it reports the CPU microseconds per output token of the whole loop and of its forward passes (the
model and its attention: `Engine.forward_logits`), and their difference, the host loop: scheduling, preparing
the batch, sampling, recording the tokens, finish checks, bookkeeping of pages and rows, and (serve) the messages.
On a GPU the forward pass is launched, not run, by the host, so the host loop is what bounds the scheduler there
once a decode step's kernels take less time than it.

--ab runs the same measurement in one process per tree, A and B alternating, `--rounds` times each: the machine's
load changes both alike. Each line gives min / median / max over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path


def workload(n: int, seed: int = 0) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    return [([rng.randrange(1, 1000) for _ in range(rng.randint(8, 64))], rng.randint(100, 400)) for _ in range(n)]


class MemoryPull:
    """ZmqPullQueue's get, from a list."""

    def __init__(self) -> None:
        self.items: list = []

    def get(self, timeout: float | None = None):
        return self.items.pop(0) if self.items else None


class MemoryPush:
    """ZmqPushQueue's put without the socket: the frame is encoded and its size counted."""

    def __init__(self, encoder) -> None:
        import msgpack

        self.encoder, self.pack, self.bytes = encoder, msgpack.packb, 0

    def put(self, obj) -> None:
        self.bytes += len(self.pack(self.encoder(obj), use_bin_type=True))


def measure(model: str, mode: str, runs: int, n: int, threads: int) -> list[dict]:
    import torch

    from minisgl.benchmark.driver import flush_prefix_cache
    from minisgl.core import SamplingParams
    from minisgl.llm import LLM
    from minisgl.message import BaseTokenizerMsg, DetokenizeMsg, ExitMsg, UserMsg
    from minisgl.scheduler.io import SchedulerIO
    from minisgl.scheduler.utils import PendingReq

    torch.set_num_threads(threads)
    work = workload(n)
    llm = LLM(model, device="cpu", max_running_reqs=n, max_seq_len=512, page_size=256, max_extend_tokens=16384,
              cpu_kv_cache_mb=512)
    sched, engine = llm.scheduler, llm.engine
    llm.generate([ids[:8] for ids, _ in work[:2]], SamplingParams(max_tokens=4, ignore_eos=True))  # warm-up
    forward_cpu = 0.0
    forward = engine.forward_logits

    def timed_forward(batch):
        nonlocal forward_cpu
        t = time.process_time()
        try:
            return forward(batch)
        finally:
            forward_cpu += time.process_time() - t

    engine.forward_logits = timed_forward
    out, uid = [], 10**6
    for _ in range(runs):
        flush_prefix_cache(sched)
        sched.history.clear()
        forward_cpu, tokens = 0.0, sum(m for _, m in work)
        reqs = [(uid + i, torch.tensor(ids, dtype=torch.int32), SamplingParams(max_tokens=m, ignore_eos=True))
                for i, (ids, m) in enumerate(work)]
        uid += n
        cpu, wall = time.process_time(), time.perf_counter()
        if mode == "offline":
            for u, ids, p in reqs:
                sched.add_request(PendingReq(u, ids, p))
            sched.run_until_idle()
            sched.finished.clear()
        else:
            recv, send = MemoryPull(), MemoryPush(BaseTokenizerMsg.encoder)
            io = SchedulerIO(sched, recv, send)
            recv.items = [UserMsg(u, ids, p) for u, ids, p in reqs]
            done = 0

            def count(msg) -> None:  # stop once every request finished: an ExitMsg after the last token
                nonlocal done
                for m in getattr(msg, "msgs", [msg]):
                    if isinstance(m, DetokenizeMsg):
                        done += sum(1 for r in m.finish_reasons if r)
                if done == n:
                    recv.items.append(ExitMsg())

            put = send.put
            send.put = lambda msg: (put(msg), count(msg))
            io.run_forever()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        out.append({"mode": mode, "tokens": tokens, "steps": len(sched.history), "wall_s": wall,
                    "tok_s": tokens / wall, "loop_us": 1e6 * cpu / tokens, "forward_us": 1e6 * forward_cpu / tokens,
                    "host_us": 1e6 * (cpu - forward_cpu) / tokens})
    return out


def spread(values: list[float]) -> str:
    return f"{min(values):7.2f} {statistics.median(values):7.2f} {max(values):7.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/tiny-qwen3")
    ap.add_argument("--modes", default="offline,serve")
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3, help="timed runs per process (after one warm-up request)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--ab", nargs=2, metavar=("A_TREE", "B_TREE"), help="two package trees, measured alternately")
    ap.add_argument("--rounds", type=int, default=3, help="with --ab: processes per tree")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # a child's answer to --ab
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    os.environ.setdefault("MINISGL_QUIET", "1")
    if args.ab is None:
        rows = [r for mode in args.modes.split(",") for r in measure(args.model, mode, args.runs, args.requests,
                                                                    args.threads)]
        if args.json:
            print(json.dumps(rows))
            return
        for r in rows:
            print(f"{r['mode']:<8} {r['tok_s']:9.0f} tok/s  CPU us per output token: loop {r['loop_us']:6.2f}  "
                  f"forward {r['forward_us']:6.2f}  host loop {r['host_us']:6.2f}  ({r['steps']} steps)")
        results = {"trees": None, "rows": rows}
    else:
        results = {"trees": args.ab, "rows": []}
        for i in range(args.rounds):
            for name, tree in zip("AB", args.ab):
                env = dict(os.environ, PYTHONPATH=f"{Path(tree).resolve()}:{Path.cwd()}")
                cmd = [sys.executable, "-m", "benchmark.probes.sched_loop_probe", "--json", "--model", args.model,
                       "--modes", args.modes, "--requests", str(args.requests), "--runs", str(args.runs),
                       "--threads", str(args.threads)]
                rows = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
                                  .stdout.strip().splitlines()[-1])
                for r in rows:
                    r.update(tree=name, round=i)
                results["rows"] += rows
                print(f"round {i} {name}: " + ", ".join(f"{r['mode']} host {r['host_us']:.2f}" for r in rows),
                      flush=True)
        print("CPU us per output token, min / median / max over every timed run:")
        for mode in args.modes.split(","):
            for name in "AB":
                rows = [r for r in results["rows"] if r["tree"] == name and r["mode"] == mode]
                print(f"  {mode:<8} {name}: host loop {spread([r['host_us'] for r in rows])}   "
                      f"loop {spread([r['loop_us'] for r in rows])}   tok/s {spread([r['tok_s'] for r in rows])}")
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
