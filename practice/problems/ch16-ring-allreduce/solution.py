def chunk_bounds(m: int, n: int) -> list[tuple[int, int]]:
    """[start, end) of each of n chunks of m elements, the first m % n one longer."""
    bounds, start = [], 0
    for i in range(n):
        size = m // n + (1 if i < m % n else 0)
        bounds.append((start, start + size))
        start += size
    return bounds


def ring_allreduce(vectors: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """Return (every rank's final vector, elements each rank sent) of a ring all-reduce."""
    if not vectors or len({len(v) for v in vectors}) != 1:
        raise ValueError("need at least one vector, all of the same length")
    n = len(vectors)
    data = [list(v) for v in vectors]
    bounds = chunk_bounds(len(data[0]), n)
    sent = [0] * n

    def step(chunk_of, combine):
        # Everything a step sends is read before anything is written: the sends happen at once.
        messages = []
        for r in range(n):
            lo, hi = bounds[chunk_of(r)]
            messages.append(((r + 1) % n, lo, data[r][lo:hi]))
            sent[r] += hi - lo
        for dst, lo, values in messages:
            for i, v in enumerate(values):
                data[dst][lo + i] = combine(data[dst][lo + i], v)

    for s in range(n - 1):
        step(lambda r: (r - s) % n, lambda mine, theirs: mine + theirs)
    for s in range(n - 1):
        step(lambda r: (r + 1 - s) % n, lambda mine, theirs: theirs)
    return data, sent
