RETRACT_DECODE_STEPS = 20


def ratio_trace(init: float, min_ratio: float, decay_steps: int, events: list) -> list[float]:
    if not 0 < init <= 1:
        raise ValueError(f"init must be in (0, 1], got {init}")
    if not 0 < min_ratio <= init:
        raise ValueError(f"min_ratio must be in (0, init], got {min_ratio}")
    if decay_steps < 1:
        raise ValueError(f"decay_steps must be >= 1, got {decay_steps}")
    decay = (init - min_ratio) / decay_steps
    current, out = init, []
    for event in events:
        if event == "step":
            current = max(current - decay, min_ratio)
        elif event == "idle":
            current = init
        elif isinstance(event, tuple) and len(event) == 2 and event[0] == "retract":
            running = event[1]
            generated = sum(g for g, _ in running)
            budget = sum(m for _, m in running)
            observed = (generated + RETRACT_DECODE_STEPS * len(running)) / (budget + 1)
            current = min(1.0, max(init, observed))
        else:
            raise ValueError(f"unknown event {event!r}")
        out.append(current)
    return out
