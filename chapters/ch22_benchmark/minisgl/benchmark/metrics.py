"""Latency and throughput from timestamps: what a user of the engine feels, measured from the outside.

Every request has a submit time and the times at which each of its output tokens reached the host (the
CPU process that would hand it to a user). From them:

    TTFT  time to first token     = first token time - submit time
    TPOT  time per output token   = (last token time - first token time) / (n - 1), n >= 2 tokens
                                    (undefined for one token: the first token belongs to TTFT)
    output throughput             = all output tokens / wall time of the whole run

In the offline benchmark every request is submitted at t = 0, so TTFT includes the time a request waits
for its turn, which is most of it when 256 prompts arrive at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class RequestTrace:
    submit: float  # seconds, any clock (the same for all the times of one run)
    token_times: list[float] = field(default_factory=list)  # when each output token reached the host

    @property
    def tokens(self) -> int:
        return len(self.token_times)


def request_latencies(trace: RequestTrace) -> tuple[float | None, float | None]:
    """(TTFT, TPOT) of one request in seconds; None where undefined (no token; fewer than two tokens).

    ValueError if the token times go backwards or a token comes before the request was submitted."""
    times = trace.token_times
    if any(b < a for a, b in zip(times, times[1:])):
        raise ValueError("token times must not decrease")
    if times and times[0] < trace.submit:
        raise ValueError(f"first token at {times[0]} before the request was submitted at {trace.submit}")
    # TODO(ch22): TTFT = first token time - submit (None without tokens); TPOT = (last - first) / (n - 1) for
    # n >= 2 tokens, else None.
    raise NotImplementedError("TODO(ch22): request_latencies")


def summarize(traces: list[RequestTrace], wall_seconds: float) -> dict:
    """Means over the requests where each latency is defined, the total and the rate of output tokens."""
    if wall_seconds <= 0:
        raise ValueError(f"wall_seconds must be > 0, got {wall_seconds}")
    # TODO(ch22): with request_latencies of every trace: "mean_ttft_s" and "mean_tpot_s" (means over the
    # requests where each is defined, None if none is), "output_tokens" (all of them), "output_tok_s"
    # (output_tokens / wall_seconds), "requests" (len(traces)) and "requests_with_tokens".
    raise NotImplementedError("TODO(ch22): summarize")


class TokenClock:
    """Collects a RequestTrace per request uid from the scheduler's per-token hook.

        clock = TokenClock(uids, submit=time.perf_counter())
        scheduler.on_token = clock.on_token
    """

    def __init__(self, uids: list[int], submit: float, clock: Callable[[], float] = time.perf_counter) -> None:
        self.traces = {uid: RequestTrace(submit) for uid in uids}
        self.clock = clock
        self.count = 0  # tokens seen so far (progress bars)

    def on_token(self, req, token: int) -> None:  # noqa: ARG002 - the hook's signature
        trace = self.traces.get(req.uid)
        if trace is not None:  # requests of other callers (a warm-up) are not ours to time
            trace.token_times.append(self.clock())
            self.count += 1

    def ordered(self, uids: list[int]) -> list[RequestTrace]:
        return [self.traces[u] for u in uids]
