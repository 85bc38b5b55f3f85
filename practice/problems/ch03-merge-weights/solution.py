# module name -> (merged module name, part index, number of parts)
MERGED = {
    "q_proj": ("qkv_proj", 0, 3),
    "k_proj": ("qkv_proj", 1, 3),
    "v_proj": ("qkv_proj", 2, 3),
    "gate_proj": ("gate_up_proj", 0, 2),
    "up_proj": ("gate_up_proj", 1, 2),
}


def merge_weights(items):
    out = []
    pending = {}  # merged name -> list of parts (None until it arrives)
    for name, rows in items:
        parts = name.split(".")
        module = parts[-2] if len(parts) >= 2 else ""
        if module not in MERGED:
            out.append((name, rows))
            continue
        merged_module, index, count = MERGED[module]
        merged_name = ".".join(parts[:-2] + [merged_module, parts[-1]])
        slots = pending.setdefault(merged_name, [None] * count)
        if slots[index] is not None:
            raise ValueError(f"{name} arrived twice")
        slots[index] = rows
        if all(s is not None for s in slots):
            out.append((merged_name, [row for part in slots for row in part]))
            del pending[merged_name]
    if pending:
        raise ValueError(f"missing parts of merged weights: {sorted(pending)}")
    return out
