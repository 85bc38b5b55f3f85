def request_metrics(events: list[tuple[float, str, str]]) -> dict[str, dict]:
    arrival: dict[str, float] = {}
    tokens: dict[str, list[float]] = {}
    for time, uid, kind in events:
        if kind == "arrive":
            if uid in arrival:
                raise ValueError(f"{uid} arrives twice")
            arrival[uid] = time
            tokens.setdefault(uid, [])
        else:
            tokens.setdefault(uid, []).append(time)
    out = {}
    for uid, times in tokens.items():
        if uid not in arrival:
            raise ValueError(f"token for {uid}, which never arrived")
        times.sort()
        if times and times[0] < arrival[uid]:
            raise ValueError(f"{uid} emits a token before it arrives")
        n = len(times)
        out[uid] = {
            "tokens": n,
            "ttft": times[0] - arrival[uid] if n else None,
            "tpot": (times[-1] - times[0]) / (n - 1) if n >= 2 else None,
            "latency": times[-1] - arrival[uid] if n else None,
        }
    return out


def summary(events: list[tuple[float, str, str]]) -> dict:
    metrics = request_metrics(events)
    ttfts = [m["ttft"] for m in metrics.values() if m["ttft"] is not None]
    tpots = [m["tpot"] for m in metrics.values() if m["tpot"] is not None]
    total = sum(m["tokens"] for m in metrics.values())
    token_times = [t for t, _, kind in events if kind == "token"]
    arrivals = [t for t, _, kind in events if kind == "arrive"]
    span = max(token_times) - min(arrivals) if token_times else 0
    return {
        "mean_ttft": sum(ttfts) / len(ttfts) if ttfts else None,
        "mean_tpot": sum(tpots) / len(tpots) if tpots else None,
        "throughput": total / span if span > 0 else None,
    }
