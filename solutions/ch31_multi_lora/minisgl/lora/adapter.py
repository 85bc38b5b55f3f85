"""Reading a LoRA adapter saved in PEFT's layout: adapter_config.json and adapter_model.safetensors.

PEFT stores, for every adapted linear layer, two matrices: A [r, in_features] ("lora_A") and B [out_features, r]
("lora_B"), under the base model's own weight names, and the layer then computes W x + (alpha / r) * B (A x).
The config gives r, lora_alpha and the target modules. Only what the engine can run is accepted; anything else
(a bias, rsLoRA's alpha / sqrt(r), a regular expression for the targets, DoRA) is a ValueError naming the field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file

# The projections of a decoder layer an adapter may target, in HF's names; the short forms are accepted on the
# command line (--lora-target-modules q,k,v).
TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SHORT_NAMES = {name.removesuffix("_proj"): name for name in TARGET_MODULES}
_KEY = re.compile(r"base_model\.model\.model\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])\.weight")


def target_modules(names) -> tuple[str, ...]:
    """The modules named (HF names or short forms, a list or a comma-separated string), in TARGET_MODULES order."""
    if isinstance(names, str):
        names = [n for n in names.split(",") if n.strip()]
    full = set()
    for name in names:
        name = SHORT_NAMES.get(str(name).strip(), str(name).strip())
        if name not in TARGET_MODULES:
            raise ValueError(f"lora_target_modules: {name!r} is not one of {', '.join(TARGET_MODULES)}")
        full.add(name)
    if not full:
        raise ValueError("lora_target_modules: name at least one module")
    return tuple(n for n in TARGET_MODULES if n in full)


@dataclass
class LoraAdapter:
    name: str
    path: str
    rank: int
    alpha: float
    targets: tuple[str, ...]
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = field(repr=False)  # (layer, module) -> A, B

    @property
    def scaling(self) -> float:
        """What PEFT multiplies B (A x) by: lora_alpha / r."""
        return self.alpha / self.rank


def load_adapter(name: str, path: str | Path) -> LoraAdapter:
    """Read a PEFT adapter folder (on the CPU, in float32). ValueError naming the file or field on anything wrong."""
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"lora_name must be a non-empty string without ':', got {name!r}")
    folder = Path(path)
    config_file, weights_file = folder / "adapter_config.json", folder / "adapter_model.safetensors"
    for f in (config_file, weights_file):
        if not f.is_file():
            raise ValueError(f"lora_path: {str(f)!r} does not exist (a PEFT adapter folder holds "
                             "adapter_config.json and adapter_model.safetensors)")
    try:
        config = json.loads(config_file.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"lora_path: {str(config_file)!r} is not JSON ({e})") from None
    rank, alpha = config.get("r"), config.get("lora_alpha")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"adapter {name!r}: r must be a positive integer, got {rank!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
        raise ValueError(f"adapter {name!r}: lora_alpha must be a positive number, got {alpha!r}")
    for key, allowed in (("bias", (None, "none")), ("use_rslora", (None, False)), ("use_dora", (None, False))):
        if config.get(key) not in allowed:
            raise ValueError(f"adapter {name!r}: {key}={config.get(key)!r} is not supported")
    if not isinstance(config.get("target_modules"), list):
        raise ValueError(f"adapter {name!r}: target_modules must be a list of module names, "
                         f"got {config.get('target_modules')!r}")
    targets = target_modules(config["target_modules"])
    pairs: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for key, tensor in load_file(str(weights_file)).items():
        m = _KEY.fullmatch(key)
        if m is None or m.group(2) not in targets:
            raise ValueError(f"adapter {name!r}: unexpected weight {key!r}")
        pairs.setdefault((int(m.group(1)), m.group(2)), {})[m.group(3)] = tensor.float()
    weights = {}
    for where, ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise ValueError(f"adapter {name!r}: layer {where[0]} {where[1]} has lora_{''.join(ab)} only")
        a, b = ab["A"], ab["B"]
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != rank or b.shape[1] != rank:
            raise ValueError(f"adapter {name!r}: layer {where[0]} {where[1]}: A {tuple(a.shape)} and "
                             f"B {tuple(b.shape)} do not fit r={rank}")
        weights[where] = (a, b)
    return LoraAdapter(name, str(folder), rank, float(alpha), targets, weights)
