"""CPU probe for chapters 14 and 15: how a burst of requests sent over HTTP reaches the scheduler.

    PYTHONPATH=$(python -m tools.course tree 27 --sol):. python -m benchmark.probes.arrival_probe \
        --model models/tiny-qwen3 --num-requests 128 --rates inf --min-len 8 --max-input-len 64 --max-output-len 100 \
        --server-args "--max-running-reqs 128 --max-seq-len 512 --cpu-kv-cache-mb 64 --device cpu"

It runs chapter 22's online benchmark (every argument goes to `benchmark.online`; --out defaults to a temporary
file) with the scheduler process instrumented: a `sitecustomize` module, put first on the server's PYTHONPATH, logs
when each receive of the scheduler loop brought requests (and how many) and when each batch was launched (its phase
and size). It prints, for the last run, the receives that brought requests and the prefill batches, in milliseconds
from the first receive: requests that reach the scheduler together are taken in one receive and prefilled together.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HOOK = '''
import os, time
if os.environ.get("ARRIVAL_LOG"):
    import minisgl.scheduler.io as io_module
    import minisgl.scheduler.scheduler as scheduler_module
    _file = None

    def _log(event, n):
        global _file
        if _file is None:
            _file = open(os.environ["ARRIVAL_LOG"] + "." + str(os.getpid()), "w", buffering=1)
        _file.write("%.6f %s %d\\n" % (time.perf_counter(), event, n))

    _receive = io_module.SchedulerIO.receive_msgs

    def receive_msgs(self, blocking):
        msgs = _receive(self, blocking)
        n = sum(type(m).__name__ == "UserMsg" for m in msgs)
        if n:
            _log("receive", n)
        return msgs

    _launch = scheduler_module.Scheduler._launch

    def launch(self, batch):
        _log(batch.phase, len(batch.reqs))
        return _launch(self, batch)

    io_module.SchedulerIO.receive_msgs = receive_msgs
    scheduler_module.Scheduler._launch = launch
'''


def main() -> None:
    args = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "sitecustomize.py").write_text(HOOK)
        log = Path(tmp) / "events"
        if "--out" not in args:
            args += ["--out", str(Path(tmp) / "online.json")]
        env = dict(os.environ, ARRIVAL_LOG=str(log), PYTHONPATH=f"{os.environ.get('PYTHONPATH', '')}:{tmp}",
                   MINISGL_QUIET="1")
        subprocess.run([sys.executable, "-m", "benchmark.online", "--runs", "1", *args], env=env, check=True)
        files = sorted(Path(tmp).glob("events.*"))
        if not files:
            raise SystemExit("no scheduler events were logged")
        events = [(float(t), e, int(n)) for f in files for t, e, n in (line.split() for line in f.open())]
    events.sort()
    receives = [i for i, (_, e, _) in enumerate(events) if e == "receive"]
    # the warm-up request comes first, alone: the run starts at the receive after the last gap of over a second
    start = receives[0]
    for a, b in zip(receives, receives[1:]):
        if events[b][0] - events[a][0] > 1.0:
            start = b
    run = events[start:]
    t0 = run[0][0]
    print("receives that brought requests (ms, requests):",
          ", ".join(f"{1e3 * (t - t0):.0f} ms: {n}" for t, e, n in run if e == "receive"))
    print("prefill batches (ms, requests):",
          ", ".join(f"{1e3 * (t - t0):.0f} ms: {n}" for t, e, n in run if e == "prefill"))
    decodes = [n for _, e, n in run if e == "decode"]
    print(f"decode batches: {len(decodes)}, largest {max(decodes, default=0)} requests")


if __name__ == "__main__":
    main()
