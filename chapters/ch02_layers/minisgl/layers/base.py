"""BaseOP: a layer that owns tensors and child layers, and can save and load them by dotted name."""

from __future__ import annotations

from typing import Any, Iterator

import torch


class BaseOP:
    """Public tensor attributes are parameters; public BaseOP attributes are children.

    state_dict() names them like PyTorch does ("model.layers.0.mlp.down_proj.weight"), so checkpoints
    map onto the engine's layers by name. Attributes starting with "_" are private (buffers, caches).
    """

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def _named_children(self) -> Iterator[tuple[str, Any]]:
        for name, value in vars(self).items():
            if not name.startswith("_") and isinstance(value, (torch.Tensor, BaseOP)):
                yield name, value

    def state_dict(self, prefix: str = "") -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for name, value in self._named_children():
            if isinstance(value, torch.Tensor):
                out[prefix + name] = value
            else:
                out.update(value.state_dict(prefix + name + "."))
        return out

    def load_state_dict(self, state_dict: dict[str, torch.Tensor], prefix: str = "") -> set[str]:
        """Copy tensors in by name; returns the names used. Shapes must match exactly."""
        used: set[str] = set()
        for name, value in self._named_children():
            key = prefix + name
            if isinstance(value, BaseOP):
                used |= value.load_state_dict(state_dict, key + ".")
                continue
            if key not in state_dict:
                raise KeyError(f"missing weight {key!r}")
            loaded = state_dict[key]
            if tuple(loaded.shape) != tuple(value.shape):
                raise ValueError(f"weight {key!r}: expected shape {tuple(value.shape)}, got {tuple(loaded.shape)}")
            setattr(self, name, loaded.to(dtype=value.dtype, device=value.device))
            used.add(key)
        return used


class StateLessOP(BaseOP):
    """A layer without parameters."""


class OPList(BaseOP):
    """A list of layers, named 0, 1, 2... in the state dict."""

    def __init__(self, ops: list[BaseOP]) -> None:
        self.ops = ops

    def _named_children(self) -> Iterator[tuple[str, Any]]:
        return ((str(i), op) for i, op in enumerate(self.ops))

    def __iter__(self) -> Iterator[BaseOP]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def __getitem__(self, i: int) -> BaseOP:
        return self.ops[i]
