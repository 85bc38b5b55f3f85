class PageTable:
    def __init__(self, max_reqs: int, max_seq_len: int) -> None:
        self.max_reqs = max_reqs
        self.max_seq_len = max_seq_len
        self.table = [[-1] * max_seq_len for _ in range(max_reqs)]

    def _check_row(self, row: int) -> None:
        if not 0 <= row < self.max_reqs:
            raise ValueError(f"row {row} is not in [0, {self.max_reqs})")

    def write(self, row: int, start: int, slots: list[int]) -> None:
        self._check_row(row)
        if start < 0 or start + len(slots) > self.max_seq_len:
            raise ValueError(f"positions {start}..{start + len(slots) - 1} do not fit in {self.max_seq_len}")
        self.table[row][start:start + len(slots)] = slots

    def read(self, row: int, length: int) -> list[int]:
        self._check_row(row)
        if not 0 <= length <= self.max_seq_len:
            raise ValueError(f"length {length} is not in [0, {self.max_seq_len}]")
        slots = self.table[row][:length]
        if -1 in slots:
            raise ValueError(f"row {row} position {slots.index(-1)} is unmapped")
        return slots

    def clear(self, row: int) -> None:
        self._check_row(row)
        self.table[row] = [-1] * self.max_seq_len

