class PageTable:
    def __init__(self, max_reqs: int, max_seq_len: int) -> None:
        raise NotImplementedError

    def write(self, row: int, start: int, slots: list[int]) -> None:
        """table[row][start + i] = slots[i]; ValueError on a bad row or out-of-range positions."""
        raise NotImplementedError

    def read(self, row: int, length: int) -> list[int]:
        """Slots of positions 0 .. length-1 of row (new list); ValueError if bad or any is unmapped."""
        raise NotImplementedError

    def clear(self, row: int) -> None:
        """Set the whole row back to -1."""
        raise NotImplementedError

