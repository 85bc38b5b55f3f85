def shared(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def route(events: list, workers: int, cache_threshold: float = 0.3, abs_threshold: int = 64,
          rel_threshold: float = 1.5) -> list:
    """The worker (0 .. workers - 1) that sglang-router's cache-aware policy picks for each ("send", text) event,
    in order. ("finish", k) events end the k-th request sent so far."""
    if workers < 1:
        raise ValueError("at least one worker")
    texts = [[] for _ in range(workers)]  # per worker: (text, when it was sent)
    loads = [0] * workers
    chosen = []
    for kind, arg in events:
        if kind == "finish":
            if not 0 <= arg < len(chosen) or loads[chosen[arg]] == 0:
                raise ValueError(f"request {arg} is not in flight")
            loads[chosen[arg]] -= 1
            continue
        least = loads.index(min(loads))
        if max(loads) - min(loads) > abs_threshold and max(loads) > min(loads) * rel_threshold:
            pick = least
        else:
            best, pick = 0, least
            first = None
            for w in range(workers):
                for text, when in texts[w]:
                    m = shared(arg, text)
                    if m > best or (m == best and m > 0 and when < first):
                        best, pick, first = m, w, when
            if not arg or best / len(arg) <= cache_threshold:
                pick = least
        texts[pick].append((arg, len(chosen)))
        loads[pick] += 1
        chosen.append(pick)
    return chosen
