def plan_steps(running: list[int], prompt_len: int, prompt_output: int, budget: int,
               mixed: bool) -> list[tuple[list[int], tuple[int, int] | None]]:
    if budget < 1 or prompt_len < 1 or prompt_output < 1 or any(r < 1 for r in running):
        raise ValueError("budget, prompt_len, prompt_output and running entries must be at least 1")
    left = list(running)  # tokens each request still generates; the prompt's request joins when prefilled
    done = 0  # prompt tokens computed so far
    steps = []
    while done < prompt_len or any(left):
        decoders = [i for i, n in enumerate(left) if n > 0]
        if not mixed and done < prompt_len:
            decoders = []  # prefill first: nobody decodes while prompt tokens are left
        room = budget - len(decoders)
        chunk = None
        if done < prompt_len and room > 0:
            chunk = (done, done + min(room, prompt_len - done))
        for i in decoders:
            left[i] -= 1
        if chunk is not None:
            done = chunk[1]
            if done == prompt_len:
                left.append(prompt_output - 1)  # first token produced now; it decodes from the next step
        steps.append((decoders, chunk))
    return steps
