def take_transfers(posted: list, waiting: dict, dropped: set, free: int) -> dict:
    """Replay a decode engine's receive loop over the transfers the prefill engine posted, in channel order.
    posted: [(room, kind)], kind "kv" or "aborted"; waiting: room -> slots the request needs; dropped: rooms aborted
    here; free: slots available. Returns {"started", "discarded", "ended", "next", "free"}."""
    if free < 0 or any(n < 0 for n in waiting.values()):
        raise ValueError("slot counts must be >= 0")
    waiting, dropped = dict(waiting), set(dropped)
    started, discarded, ended = [], [], []
    k = 0
    for k, (room, kind) in enumerate(posted):
        if kind not in ("kv", "aborted"):
            raise ValueError(f"transfer {k}: kind must be 'kv' or 'aborted', got {kind!r}")
        if kind == "aborted":
            dropped.discard(room)
            if waiting.pop(room, None) is not None:
                ended.append(room)
        elif room in dropped:
            dropped.discard(room)
            discarded.append(room)
        elif room in waiting and waiting[room] <= free:
            free -= waiting.pop(room)
            started.append(room)
        else:
            return {"started": started, "discarded": discarded, "ended": ended, "next": k, "free": free}
    return {"started": started, "discarded": discarded, "ended": ended, "next": len(posted), "free": free}
