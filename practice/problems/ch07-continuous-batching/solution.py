def schedule(requests: list[tuple[str, int, int, int]], max_running: int,
             token_budget: int) -> list[tuple[str, list[str]]]:
    for uid, _, prompt_len, output_len in requests:
        if prompt_len > token_budget:
            raise ValueError(f"{uid}: prompt of {prompt_len} tokens exceeds the budget of {token_budget}")
        if output_len < 1:
            raise ValueError(f"{uid}: output_len must be at least 1")
    pending = sorted(range(len(requests)), key=lambda i: (requests[i][1], i))
    running: list[int] = []
    produced = [0] * len(requests)
    steps: list[tuple[str, list[str]]] = []
    step = 0
    while pending or running:
        admitted, budget = [], token_budget
        while (pending and requests[pending[0]][1] <= step and len(running) + len(admitted) < max_running
               and requests[pending[0]][2] <= budget):
            budget -= requests[pending[0]][2]
            admitted.append(pending.pop(0))
        if admitted:
            running.extend(admitted)
            batch, kind = admitted, "prefill"
        elif running:
            batch, kind = list(running), "decode"
        else:
            batch, kind = [], "idle"
        steps.append((kind, [requests[i][0] for i in batch]))
        for i in batch:
            produced[i] += 1
        running = [i for i in running if produced[i] < requests[i][3]]
        step += 1
    return steps
