def _argmax(row: list[float]) -> int:
    best = 0
    for i, v in enumerate(row):
        if v > row[best]:  # strict: ties keep the smaller id
            best = i
    return best


def greedy_generate(model, prompt_ids: list[int], max_new_tokens: int, eos_ids=()) -> list[int]:
    if not prompt_ids:
        raise ValueError("empty prompt")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    stop = set(eos_ids)
    rows = model(list(prompt_ids), 0)
    out: list[int] = []
    while True:
        token = _argmax(rows[-1])
        out.append(token)
        if len(out) == max_new_tokens or token in stop:
            return out
        # the token just picked sits right after everything computed so far
        rows = model([token], len(prompt_ids) + len(out) - 1)
