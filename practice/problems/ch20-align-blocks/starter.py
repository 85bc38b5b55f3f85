def align_blocks(ids: list[list[int]], num_experts: int, block: int) -> tuple[list[int], list[int]]:
    """(entries laid out by expert, each run padded to whole blocks; the expert of every block)."""
    raise NotImplementedError
