def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0 <= q <= 100) by linear interpolation between closest ranks."""
    raise NotImplementedError


def latency_report(requests: list[tuple[float, list[float]]], ttft_slo: float, tpot_slo: float) -> dict:
    """{"p50_ttft", "p99_ttft", "p50_tpot", "p99_tpot", "goodput"} of (submit, token times) pairs."""
    raise NotImplementedError
