"""TableManager: request rows of the page table and of the token pool.

page_table[row, pos] is the KV slot holding the key/value of token `pos` of the request in `row`;
token_pool[row, pos] is that token's id. A request owns one row from admission until it finishes.

The two tables are tensors of the engine (chapter 6 makes them; the forward pass reads them); the manager
only decides which row belongs to which request. Rows past `max_running_reqs` are never handed out.
"""

from __future__ import annotations

from collections.abc import Sequence

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
        if not self._free_rows:
            raise MemoryError(f"all {self.max_running_reqs} request rows are in use")
        return self._free_rows.pop()

    def free(self, row: int) -> None:
        if not 0 <= row < self.max_running_reqs or row in self._free_rows:
            raise ValueError(f"row {row} is not in use")
        self._free_rows.append(row)

    def check_integrity(self, held_rows: Sequence[int] = ()) -> None:
        """Every row is free or in held_rows (the rows of live requests: none when the engine is idle), exactly once."""
        rows = sorted([*self._free_rows, *held_rows])
        if rows != list(range(self.max_running_reqs)):
            if len(set(rows)) != len(rows):
                raise AssertionError(f"request rows both free and held, or held twice: {sorted(held_rows)}")
            raise AssertionError("request rows leaked: some rows were never freed")
