"""TableManager: request rows of the page table and of the token pool.

page_table[row, pos] is the KV slot holding the key/value of token `pos` of the request in `row`;
token_pool[row, pos] is that token's id. A request owns one row from admission until it finishes.

Chapter 18 adds one row past the last request row, the padding row: never handed out, it is where the
dummy requests that pad a batch to a captured CUDA-graph size read and write.
"""

from __future__ import annotations

import torch


class TableManager:
    def __init__(self, max_running_reqs: int, max_seq_len: int, device: str | torch.device = "cpu") -> None:
        self.max_running_reqs = max_running_reqs
        self.max_seq_len = max_seq_len
        self.padding_row = max_running_reqs
        self.page_table = torch.zeros(max_running_reqs + 1, max_seq_len, dtype=torch.int32, device=device)
        self.token_pool = torch.zeros(max_running_reqs + 1, max_seq_len, dtype=torch.int32, device=device)
        self._free_rows: list[int] = list(range(max_running_reqs - 1, -1, -1))

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

    def check_integrity(self) -> None:
        if sorted(self._free_rows) != list(range(self.max_running_reqs)):
            raise AssertionError("request rows leaked: some rows were never freed")
