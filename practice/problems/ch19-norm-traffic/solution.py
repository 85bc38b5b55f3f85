def norm_traffic(tokens, hidden, dtype_bytes, residual, fused):
    if tokens < 1 or hidden < 1 or dtype_bytes not in (2, 4):
        raise ValueError(f"bad shape or dtype: tokens={tokens}, hidden={hidden}, dtype_bytes={dtype_bytes}")
    n, s = tokens * hidden, dtype_bytes
    if fused:
        inputs = 2 if residual else 1
        outputs = 2 if residual else 1
        return inputs * n * s + hidden * s + outputs * n * s, 1
    steps = []  # (reads, writes) of every kernel that runs
    if residual:
        steps.append((2 * n * s, n * s))
    if s != 4:
        steps.append((n * s, n * 4))  # .float()
    steps += [(n * 4, n * 4), (n * 4, tokens * 4), (tokens * 4, tokens * 4), (tokens * 4, tokens * 4),
              (n * 4 + tokens * 4, n * 4)]
    if s != 4:
        steps.append((n * 4, n * s))  # .to(dtype)
    steps.append((hidden * s + n * s, n * s))
    return sum(r + w for r, w in steps), len(steps)
