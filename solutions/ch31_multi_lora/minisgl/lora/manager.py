"""The scheduler's side of LoRA: which adapters are known, which sit in the engine's slots, and admission.

An adapter is loaded (registered) from a PEFT folder at start (--lora-paths) or later (LLM / the server's
/load_lora_adapter route); its weights wait on the CPU until a request needs it. The engine has
max_loras_per_batch slots. A request's adapter must be in a slot when it is admitted: if it is not, it takes a slot
no live request uses (an empty one first, else the least recently used) and is copied in; if every slot is used by
a live request, the request waits (the prefill queue admits in order, so it is next once a slot frees: never
starved). Because a slot changes only when no live request reads it, a batch never holds more distinct adapters
than slots.
"""

from __future__ import annotations

from collections.abc import Collection

from minisgl.lora.adapter import LoraAdapter, load_adapter
from minisgl.lora.buffers import LoraBuffers


class LoraManager:
    def __init__(self, buffers: LoraBuffers, paths: dict[str, str] | None = None) -> None:
        self.buffers = buffers
        self.adapters: dict[str, LoraAdapter] = {}
        self.ids: dict[str, int] = {}  # name -> its prefix-cache id (never reused: see lora/prefix.py)
        self._next_id = 1
        self.slot_names: list[str | None] = [None] * buffers.num_slots  # which adapter each slot holds
        self.last_used = [0] * buffers.num_slots
        self._clock = 0
        for name, path in (paths or {}).items():
            self.load(name, path)

    @property
    def num_slots(self) -> int:
        return self.buffers.num_slots

    def load(self, name: str, path: str) -> LoraAdapter:
        """Register an adapter (ValueError naming the problem; nothing changes then)."""
        if name in self.adapters:
            raise ValueError(f"lora_name {name!r} is already loaded (unload it first)")
        adapter = load_adapter(name, path)
        self.buffers.check(adapter)
        self.adapters[name] = adapter
        self.ids[name] = self._next_id
        self._next_id += 1
        return adapter

    def unload(self, name: str, live: Collection[str | None]) -> None:
        """Forget an adapter. Refused (ValueError) while a waiting or running request uses it: its requests would
        lose their weights mid-answer; unload once they finished."""
        if name not in self.adapters:
            raise ValueError(f"lora_name {name!r} is not loaded")
        if name in live:
            raise ValueError(f"lora_name {name!r} is used by requests in flight; unload it when they finished")
        del self.adapters[name], self.ids[name]
        if name in self.slot_names:
            slot = self.slot_names.index(name)
            self.slot_names[slot] = None
            self.buffers.load(slot, None)

    def lora_id(self, name: str | None) -> int:
        return 0 if name is None else self.ids[name]

    def acquire(self, name: str, live: Collection[str | None]) -> int | None:
        """The slot of adapter `name` for a request being admitted, copying it into a slot if it is not resident;
        None if every slot holds an adapter that a live request (`live`: the adapters of the admitted requests,
        this batch's included) still uses."""
        # TODO(ch31): one tick of self._clock per call. Resident (name in self.slot_names): stamp and return its
        # slot. Otherwise take an empty slot, else the least recently used slot whose adapter is not in `live`
        # (never one a live request reads: its rows would switch adapter mid-answer, and the batch would hold more
        # adapters than slots); none: return None. Copy the adapter in (self.buffers.load), record the slot's
        # name and stamp it.
        # >>> solution
        self._clock += 1
        if name in self.slot_names:
            slot = self.slot_names.index(name)
            self.last_used[slot] = self._clock
            return slot
        free = [s for s, held in enumerate(self.slot_names) if held is None]
        if not free:
            free = [s for s, held in enumerate(self.slot_names) if held not in live]
        if not free:
            return None
        slot = min(free, key=lambda s: self.last_used[s])
        self.buffers.load(slot, self.adapters[name])
        self.slot_names[slot] = name
        self.last_used[slot] = self._clock
        return slot
        # <<< solution
