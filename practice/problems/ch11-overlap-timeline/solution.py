def timeline(cpu: list[float], gpu: list[float], overlap: bool) -> tuple[float, float]:
    if len(cpu) != len(gpu) or any(x < 0 for x in list(cpu) + list(gpu)):
        raise ValueError("cpu and gpu must be equally long lists of non-negative times")
    cpu_end, gpu_end = [], []   # finish times per step

    def done(ends: list[float], i: int) -> float:
        return ends[i] if i >= 0 else 0

    for i in range(len(cpu)):
        if overlap:
            start = max(done(cpu_end, i - 1), done(gpu_end, i - 2))
        else:
            start = done(gpu_end, i - 1)
        cpu_end.append(start + cpu[i])
        gpu_end.append(max(cpu_end[i], done(gpu_end, i - 1)) + gpu[i])
    total = gpu_end[-1] if gpu_end else 0
    return total, total - sum(gpu)
