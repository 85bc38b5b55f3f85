"""TableManager: request rows of the page table and of the token pool.

page_table[row, pos] is the KV slot holding the key/value of token `pos` of the request in `row`;
token_pool[row, pos] is that token's id. A request owns one row from admission until it finishes.

The two tables are tensors of the engine (chapter 6 makes them; the forward pass reads them); the manager
only decides which row belongs to which request. Rows past `max_running_reqs` are never handed out.
"""

from __future__ import annotations

import torch


class TableManager:
    def __init__(self, max_running_reqs: int, page_table: torch.Tensor, token_pool: torch.Tensor) -> None:
        if page_table.shape != token_pool.shape or page_table.shape[0] < max_running_reqs:
            raise ValueError(f"page table {tuple(page_table.shape)} and token pool {tuple(token_pool.shape)} need the "
                             f"same shape and at least max_running_reqs={max_running_reqs} rows")
        self.max_running_reqs = max_running_reqs
        self.page_table = page_table
        self.token_pool = token_pool
        self._free_rows: list[int] = list(range(max_running_reqs - 1, -1, -1))

    @classmethod
    def with_new_tables(cls, max_running_reqs: int, width: int, device: str | torch.device = "cpu") -> TableManager:
        """A manager over fresh zeroed tables of `width` positions per row (before chapter 6's engine exists)."""
        page_table = torch.zeros(max_running_reqs, width, dtype=torch.int32, device=device)
        return cls(max_running_reqs, page_table, torch.zeros_like(page_table))

    @property
    def available_size(self) -> int:
        return len(self._free_rows)

    def allocate(self) -> int:
        """Take a free row; raise MemoryError if every row is in use."""
        # TODO(ch04): pop a free row index, or raise MemoryError when none is left.
        raise NotImplementedError("TODO(ch04): TableManager.allocate")

    def free(self, row: int) -> None:
        # TODO(ch04): give the row back; a row that is out of range or already free raises ValueError.
        raise NotImplementedError("TODO(ch04): TableManager.free")

    def check_integrity(self) -> None:
        if sorted(self._free_rows) != list(range(self.max_running_reqs)):
            raise AssertionError("request rows leaked: some rows were never freed")
