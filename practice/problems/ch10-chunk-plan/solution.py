from collections import deque


def plan_chunks(prompt_lens: list[int], budget: int, arrivals: list[int] | None = None) -> list[list[tuple[int, int, int]]]:
    if budget < 1 or any(n < 1 for n in prompt_lens):
        raise ValueError("budget and prompt lengths must be at least 1")
    arrivals = arrivals if arrivals is not None else [0] * len(prompt_lens)
    done = [0] * len(prompt_lens)           # prompt tokens computed so far (the request's cached_len)
    queue: deque[int] = deque()
    joined, finished, batches, step = set(), 0, [], 0
    while finished < len(prompt_lens):
        for i, t in enumerate(arrivals):
            if t <= step and i not in joined:
                joined.add(i)
                queue.append(i)
        batch, left = [], budget
        while left > 0 and queue:
            req = queue[0]
            chunk = min(left, prompt_lens[req] - done[req])
            batch.append((req, done[req], done[req] + chunk))
            done[req] += chunk
            left -= chunk
            if done[req] == prompt_lens[req]:
                queue.popleft()
                finished += 1
            # else: a chunked request stays at the front, and left == 0 ends the batch
        batches.append(batch)
        step += 1
    return batches
