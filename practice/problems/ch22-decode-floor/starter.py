def decode_floor(requests: list[tuple[int, int]], max_batch: int, weight_bytes: float, kv_bytes_per_token: float,
                 bandwidth: float) -> tuple[int, float]:
    """(decode steps, sum of their memory floors in seconds) of a first-come-first-served schedule of at
    most max_batch running requests; requests are (prompt_len, output_len), already prefilled."""
    raise NotImplementedError
