def take_transfers(posted: list, waiting: dict, dropped: set, free: int) -> dict:
    """Replay a decode engine's receive loop over the transfers the prefill engine posted, in channel order.
    posted: [(room, kind)], kind "kv" or "aborted"; waiting: room -> slots the request needs; dropped: rooms aborted
    here; free: slots available. Returns {"started", "discarded", "ended", "next", "free"}."""
    raise NotImplementedError
