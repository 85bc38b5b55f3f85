class SlotAllocator:
    def __init__(self, num_slots: int) -> None:
        raise NotImplementedError

    @property
    def available(self) -> int:
        """Number of free slots."""
        raise NotImplementedError

    def allocate(self, n: int) -> list[int]:
        """n distinct free slots, or MemoryError (nothing changed) if fewer are free; ValueError if n < 0."""
        raise NotImplementedError

    def free(self, slots: list[int]) -> None:
        """Give slots back; ValueError (nothing freed) on out-of-range, not-allocated or repeated slots."""
        raise NotImplementedError
