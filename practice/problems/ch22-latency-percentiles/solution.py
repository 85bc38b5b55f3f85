import math


def percentile(values: list[float], q: float) -> float:
    if not values:
        raise ValueError("percentile of an empty list")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    xs = sorted(values)
    pos = q / 100 * (len(xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def latency_report(requests: list[tuple[float, list[float]]], ttft_slo: float, tpot_slo: float) -> dict:
    ttfts, tpots, good = [], [], 0
    for submit, times in requests:
        if any(b < a for a, b in zip(times, times[1:])):
            raise ValueError("token times must not decrease")
        if times and times[0] < submit:
            raise ValueError("a token before its request was submitted")
        if not times:
            continue
        ttft = times[0] - submit
        tpot = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None
        ttfts.append(ttft)
        if tpot is not None:
            tpots.append(tpot)
        good += ttft <= ttft_slo and (tpot is None or tpot <= tpot_slo)
    return {
        "p50_ttft": percentile(ttfts, 50) if ttfts else None,
        "p99_ttft": percentile(ttfts, 99) if ttfts else None,
        "p50_tpot": percentile(tpots, 50) if tpots else None,
        "p99_tpot": percentile(tpots, 99) if tpots else None,
        "goodput": good / len(requests) if requests else None,
    }
