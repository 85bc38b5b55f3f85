"""The prefix cache keyed by adapter.

The KV of a prompt depends on the adapter that computed it (A and B change k and v in every layer from the first),
so two requests share cached KV only if they share the tokens AND the adapter. The radix tree compares keys element
by element; giving every adapter its own range of key values makes each adapter a separate subtree under the root,
with no change to the tree. SGLang keys its radix cache by the LoRA id in the same spirit.
"""

from __future__ import annotations

KEY_STRIDE = 1 << 32  # above any vocabulary: keys of different adapters never compare equal


def prefix_key(ids: list[int], lora_id: int) -> list[int]:
    """The radix-tree key of a run of token ids computed under adapter `lora_id` (0: the base model, whose keys are
    the ids themselves, as before this chapter). Ids are never reused: an adapter loaded again gets a new id, so
    KV cached under an unloaded adapter is never matched, only evicted."""
    # TODO(ch31): the base model's key is `ids` unchanged; any other adapter moves every id into its own range
    # (id + lora_id * KEY_STRIDE), so no element equals one of another adapter's keys.
    # >>> solution
    if lora_id == 0:
        return ids
    offset = lora_id * KEY_STRIDE
    return [t + offset for t in ids]
    # <<< solution
