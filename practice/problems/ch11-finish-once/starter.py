from typing import Callable


def overlap_run(max_tokens: list[int], next_token: Callable[[int, int], int], eos: int) -> dict:
    """Simulate the overlap loop of the statement.

    Returns {"outputs": list of token lists, "freed": rids in free order,
             "discarded": (step, rid) pairs, "batches": launched batches (lists of rids)}.
    """
    raise NotImplementedError
