class Req:
    def __init__(self, prompt_len: int, output_len: int, cached_len: int = 0) -> None:
        if prompt_len < 1 or output_len < 1:
            raise ValueError(f"prompt_len and output_len must be >= 1, got {prompt_len}, {output_len}")
        if not 0 <= cached_len < prompt_len:
            raise ValueError(f"cached_len {cached_len} must be in [0, {prompt_len})")
        self.cached_len = cached_len
        self.device_len = prompt_len
        self.max_device_len = prompt_len + output_len

    @property
    def extend_len(self) -> int:
        return self.device_len - self.cached_len

    @property
    def remain_len(self) -> int:
        return self.max_device_len - self.device_len

    @property
    def can_decode(self) -> bool:
        return self.remain_len > 0

    def complete_one(self) -> None:
        if not self.can_decode:
            raise RuntimeError("the request is finished")
        self.cached_len = self.device_len
        self.device_len += 1


def trace(prompt_len: int, output_len: int, prefix_hit: int = 0) -> list[tuple[int, int, int]]:
    req = Req(prompt_len, output_len, min(prefix_hit, prompt_len - 1))
    passes = []
    while True:
        passes.append((req.cached_len, req.device_len, req.extend_len))
        req.complete_one()
        if not req.can_decode:
            return passes
