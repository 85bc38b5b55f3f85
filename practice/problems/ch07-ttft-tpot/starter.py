def request_metrics(events: list[tuple[float, str, str]]) -> dict[str, dict]:
    """events: (time, uid, "arrive" | "token") in any order.
    Per uid: {"tokens", "ttft", "tpot", "latency"} (None where undefined)."""
    raise NotImplementedError


def summary(events: list[tuple[float, str, str]]) -> dict:
    """{"mean_ttft", "mean_tpot", "throughput"} (None where undefined)."""
    raise NotImplementedError
