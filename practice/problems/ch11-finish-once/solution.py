from typing import Callable


def overlap_run(max_tokens: list[int], next_token: Callable[[int, int], int], eos: int) -> dict:
    if any(m < 1 for m in max_tokens):
        raise ValueError("max_tokens must be at least 1")
    n = len(max_tokens)
    outputs = [[] for _ in range(n)]
    launches = [0] * n                 # k: how many times each request was launched
    finished: set[int] = set()
    freed, discarded, batches = [], [], []
    pending = None                     # (step, [(rid, token), ...])

    def process(step: int, results: list[tuple[int, int]]) -> None:
        for rid, token in results:
            if rid in finished:        # launched once more before we knew: drop the token
                discarded.append((step, rid))
                continue
            outputs[rid].append(token)
            if token == eos or len(outputs[rid]) >= max_tokens[rid]:
                finished.add(rid)
                freed.append(rid)

    while True:
        batch = [rid for rid in range(n) if rid not in finished]
        launched = None
        if batch:
            results = []
            for rid in batch:
                results.append((rid, next_token(rid, launches[rid])))
                launches[rid] += 1
            launched = (len(batches), results)
            batches.append(batch)
        if pending:
            process(*pending)
        if not batch and not pending:
            break
        pending = launched
    return {"outputs": outputs, "freed": freed, "discarded": discarded, "batches": batches}
