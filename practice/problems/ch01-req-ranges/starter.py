class Req:
    def __init__(self, prompt_len: int, output_len: int, cached_len: int = 0) -> None:
        """Validate, then set cached_len, device_len and max_device_len."""
        raise NotImplementedError

    @property
    def extend_len(self) -> int:
        """Tokens the next forward pass computes."""
        raise NotImplementedError

    @property
    def remain_len(self) -> int:
        """Tokens that may still be generated."""
        raise NotImplementedError

    @property
    def can_decode(self) -> bool:
        raise NotImplementedError

    def complete_one(self) -> None:
        """A forward pass finished: update the cursors (RuntimeError if the request cannot decode)."""
        raise NotImplementedError


def trace(prompt_len: int, output_len: int, prefix_hit: int = 0) -> list[tuple[int, int, int]]:
    """(cached_len, device_len, extend_len) seen by every forward pass, prefill to the end."""
    raise NotImplementedError
