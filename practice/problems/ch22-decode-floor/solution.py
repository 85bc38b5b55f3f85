def decode_floor(requests: list[tuple[int, int]], max_batch: int, weight_bytes: float, kv_bytes_per_token: float,
                 bandwidth: float) -> tuple[int, float]:
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    if bandwidth <= 0:
        raise ValueError(f"bandwidth must be > 0, got {bandwidth}")
    if any(p < 1 or n < 1 for p, n in requests):
        raise ValueError("prompt and output lengths must be >= 1")
    waiting = [[p, n, 1] for p, n in requests if n > 1]  # prompt, output length, tokens made so far
    waiting.reverse()  # pop() takes the first in list order
    running: list[list[int]] = []
    steps, seconds = 0, 0.0
    while waiting or running:
        while waiting and len(running) < max_batch:
            running.append(waiting.pop())
        context = sum(p + made for p, _, made in running)
        seconds += (weight_bytes + kv_bytes_per_token * context) / bandwidth
        steps += 1
        for req in running:
            req[2] += 1
        running = [r for r in running if r[2] < r[1]]
    return steps, seconds
