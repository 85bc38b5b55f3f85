def held_pages(prompt_len: int, generated: int, page_size: int) -> int:
    return -(-(prompt_len + generated - 1) // page_size)


def step_pages(prompt_len: int, generated: int, page_size: int) -> int:
    return 1 if (prompt_len + generated - 1) % page_size == 0 else 0


def make_room(running: list[tuple[str, int, int]], available: int, page_size: int, policy: str,
              pinned: set[str]) -> dict:
    if policy not in ("length", "last"):
        raise ValueError(f"unknown policy {policy!r}")
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    for uid, prompt_len, generated in running:
        if prompt_len < 1 or generated < 1:
            raise ValueError(f"{uid}: prompt_len and generated must be >= 1")
    keep = list(running)
    retract = []
    while keep and sum(step_pages(p, g, page_size) for _, p, g in keep) > available:
        if len(keep) == 1:
            break
        candidates = [(i, r) for i, r in enumerate(keep) if r[0] not in pinned]
        if not candidates:
            break
        if policy == "last":
            _, victim = candidates[-1]
        else:
            _, victim = min(candidates, key=lambda c: (c[1][2], -c[1][1], -c[0]))
        keep.remove(victim)
        retract.append(victim[0])
        available += held_pages(victim[1], victim[2], page_size)
    fits = sum(step_pages(p, g, page_size) for _, p, g in keep) <= available
    return {"retract": retract, "keep": [r[0] for r in keep], "fits": fits}
