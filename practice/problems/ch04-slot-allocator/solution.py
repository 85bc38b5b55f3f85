class SlotAllocator:
    def __init__(self, num_slots: int) -> None:
        self.num_slots = num_slots
        self._free = list(range(num_slots - 1, -1, -1))  # pop() hands out low slots first
        self._used = set()

    @property
    def available(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        if n < 0:
            raise ValueError(f"cannot allocate {n} slots")
        if n > len(self._free):
            raise MemoryError(f"asked for {n} slots, only {len(self._free)} free")
        slots = [self._free.pop() for _ in range(n)]
        self._used.update(slots)
        return slots

    def free(self, slots: list[int]) -> None:
        if len(set(slots)) != len(slots):
            raise ValueError(f"a slot is listed twice in {slots}")
        for s in slots:
            if s not in self._used:
                raise ValueError(f"slot {s} is not allocated (double free or out of range)")
        self._used.difference_update(slots)
        self._free.extend(slots)
