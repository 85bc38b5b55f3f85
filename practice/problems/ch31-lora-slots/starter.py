def acquire(state: dict, name: str, live: set) -> int | None:
    """The slot of adapter `name` for a request being admitted (see the statement); None when every slot holds an
    adapter in `live`."""
    raise NotImplementedError


def token_slots(reqs: list, slot_of: dict) -> list:
    """The slot of every token of the batch, request after request; -1 for a request without an adapter."""
    raise NotImplementedError
