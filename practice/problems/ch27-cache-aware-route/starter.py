def route(events: list, workers: int, cache_threshold: float = 0.3, abs_threshold: int = 64,
          rel_threshold: float = 1.5) -> list:
    """The worker (0 .. workers - 1) that sglang-router's cache-aware policy picks for each ("send", text) event,
    in order. ("finish", k) events end the k-th request sent so far."""
    raise NotImplementedError
