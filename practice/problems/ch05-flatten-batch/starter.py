def flatten(reqs: list[tuple[int, int]]) -> dict:
    """reqs: (cached_len, device_len) per request. See the statement for the four keys to return."""
    raise NotImplementedError
