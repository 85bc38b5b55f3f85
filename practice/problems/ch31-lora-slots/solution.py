def acquire(state: dict, name: str, live: set) -> int | None:
    """The slot of adapter `name` for a request being admitted (see the statement); None when every slot holds an
    adapter in `live`."""
    state["clock"] += 1
    slots, last = state["slots"], state["last_used"]
    if name in slots:
        s = slots.index(name)
        last[s] = state["clock"]
        return s
    free = [s for s, held in enumerate(slots) if held is None]
    if not free:
        free = [s for s, held in enumerate(slots) if held not in live]
    if not free:
        return None
    s = min(free, key=lambda i: (last[i], i))
    slots[s] = name
    last[s] = state["clock"]
    return s


def token_slots(reqs: list, slot_of: dict) -> list:
    """The slot of every token of the batch, request after request; -1 for a request without an adapter."""
    out = []
    for name, n in reqs:
        if n < 1:
            raise ValueError(f"extend_len must be >= 1, got {n}")
        if name is not None and name not in slot_of:
            raise ValueError(f"adapter {name!r} has no slot")
        out += [-1 if name is None else slot_of[name]] * n
    return out
