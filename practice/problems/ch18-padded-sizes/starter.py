def plan_padding(sizes: list[int], batches: list[int]) -> tuple[list[int | None], int]:
    """For each decode batch size, the smallest captured size (ascending `sizes`) that holds it, or None when
    it is larger than every captured size (it runs eagerly); and the total number of dummy (padding) rows.
    ValueError if sizes is empty, not strictly ascending or holds a size < 1, or a batch size is < 1."""
    raise NotImplementedError


def best_sizes(histogram: dict[int, int], k: int) -> list[int]:
    """At most k capture sizes, sorted, including the largest observed batch size, that minimise the total
    padding sum(count * (padded - size)) over the histogram {batch size: count}.
    ValueError if k < 1, the histogram is empty, or it holds a size < 1 or a count < 1."""
    raise NotImplementedError
