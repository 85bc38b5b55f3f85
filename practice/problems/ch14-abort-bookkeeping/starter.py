def route(messages: list[tuple]) -> tuple[list[int], list[tuple]]:
    """(uids to abort in the scheduler, replies (uid, token, reason, count) to the client)."""
    raise NotImplementedError
