import bisect


def plan_padding(sizes, batches):
    if not sizes or any(a >= b for a, b in zip(sizes, sizes[1:])) or sizes[0] < 1:
        raise ValueError(f"captured sizes must be distinct positive integers in ascending order, got {sizes}")
    padded, dummy = [], 0
    for n in batches:
        if n < 1:
            raise ValueError(f"batch size {n} < 1")
        i = bisect.bisect_left(sizes, n)
        if i == len(sizes):
            padded.append(None)  # larger than every graph: the eager path
        else:
            padded.append(sizes[i])
            dummy += sizes[i] - n
    return padded, dummy


def best_sizes(histogram, k):
    if k < 1:
        raise ValueError(f"k = {k} < 1")
    if not histogram:
        raise ValueError("empty histogram")
    if any(n < 1 or c < 1 for n, c in histogram.items()):
        raise ValueError(f"sizes and counts must be >= 1: {histogram}")
    xs = sorted(histogram)
    m = len(xs)
    k = min(k, m)

    count, weighted = [0], [0]  # prefix sums over xs: rows, and rows times size
    for x in xs:
        count.append(count[-1] + histogram[x])
        weighted.append(weighted[-1] + histogram[x] * x)

    def pad(i, j):
        """Dummy rows when xs[j] serves xs[i+1 .. j] (i = -1: every size up to xs[j])."""
        return xs[j] * (count[j + 1] - count[i + 1]) - (weighted[j + 1] - weighted[i + 1])

    inf = float("inf")
    # cost[c][j]: least padding of xs[0..j] with c captured sizes, the largest being xs[j]; back[c][j] the one before
    cost = [[inf] * m for _ in range(k + 1)]
    back = [[-1] * m for _ in range(k + 1)]
    for j in range(m):
        cost[1][j] = pad(-1, j)
    for c in range(2, k + 1):
        for j in range(m):
            for i in range(j):
                total = cost[c - 1][i] + pad(i, j)
                if total < cost[c][j]:
                    cost[c][j], back[c][j] = total, i
    c = min(range(1, k + 1), key=lambda c: cost[c][m - 1])
    chosen, j = [], m - 1
    while j >= 0:
        chosen.append(xs[j])
        j, c = back[c][j], c - 1
    return chosen[::-1]
