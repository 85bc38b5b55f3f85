"""make draft: train chapter 26's EAGLE head by self-distillation and save it beside the other models.

    PYTHONPATH=<a chapter-26 tree> python -m tools.eagle --target smollm2 --out models/smollm2-eagle

1. The target (Hugging Face, float32) answers the course's training prompts greedily (tools/data/eagle_prompts.json,
   "train"; "eval" is held out for measuring acceptance).
2. One more pass over each prompt + answer records, at every position p, the target's feature f_p (what its LM head
   reads) and its greedy token after p.
3. The head learns, from pairs (f_p, token p + 1), to predict the target's token after p + 1 (cross-entropy over the
   draft vocabulary) and its feature f_(p+1) (smooth L1), in chunks of consecutive positions.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

PROMPTS = Path(__file__).parent / "data" / "eagle_prompts.json"


@dataclass
class Sequence:
    tokens: torch.Tensor  # [T] prompt + answer
    features: torch.Tensor  # [T, H] the target's feature at each position
    next_tokens: torch.Tensor  # [T] the target's greedy token after each position


def prompts(split: str) -> list[str]:
    return json.loads(PROMPTS.read_text())[split]


def encode(tokenizer, text: str) -> list[int]:
    """A chat prompt where the tokenizer has a chat template, the plain text otherwise (the tiny models)."""
    if tokenizer.chat_template:
        return list(tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                  tokenize=True, return_dict=False))
    return tokenizer.encode(text)


@torch.no_grad()
def collect(model, prompt_ids: list[list[int]], max_new: int, progress: bool = True) -> list[Sequence]:
    """The target's greedy answers to the prompts, and its features and greedy tokens over prompt + answer."""
    from tqdm import tqdm

    eos = model.generation_config.eos_token_id
    out = []
    for ids in tqdm(prompt_ids, desc="target answers", disable=not progress):
        x = torch.tensor([ids])
        answer = model.generate(x, do_sample=False, max_new_tokens=max_new, pad_token_id=eos)[0]
        result = model.model(answer[None])
        features = result.last_hidden_state[0]  # after the final norm: the LM head's input
        out.append(Sequence(answer, features.float(), model.lm_head(features).argmax(-1)))
    return out


def draft_vocab(data: list[Sequence], size: int) -> torch.Tensor:
    """The `size` tokens the target predicts most often in the training text (ties: lower id), sorted."""
    counts = Counter()
    for s in data:
        counts.update(s.next_tokens.tolist())
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:size]
    return torch.tensor(sorted(t for t, _ in top))


def chunks(data: list[Sequence], length: int) -> list[tuple[torch.Tensor, ...]]:
    """Training chunks of up to `length` pairs: (features f_p, tokens p + 1, positions p, labels: the target's
    token after p + 1, feature targets f_(p+1))."""
    out = []
    for s in data:
        pairs = len(s.tokens) - 2  # p = 0 .. T - 3: token p + 1 and the label after it exist
        for a in range(0, pairs, length):
            b = min(a + length, pairs)
            p = torch.arange(a, b)
            out.append((s.features[p], s.tokens[p + 1], p, s.next_tokens[p + 1], s.features[p + 1]))
    return out


def pad(batch: list[tuple[torch.Tensor, ...]]):
    width = max(len(c[0]) for c in batch)
    fill = lambda t, v: torch.cat([t, t.new_full((width - len(t), *t.shape[1:]), v)])  # noqa: E731
    cols = [torch.stack([fill(c[j], 0) for c in batch]) for j in range(5)]
    valid = torch.stack([torch.arange(width) < len(c[0]) for c in batch])
    return (*cols, valid)


def train(head, data: list[Sequence], steps: int, lr: float = 1e-3, batch_size: int = 8, length: int = 64,
          noise: float = 0.05, seed: int = 0, progress: bool = True) -> list[float]:
    """AdamW on the head's fc and layer; the loss per step (cross-entropy + smooth L1 on the features)."""
    from tqdm import tqdm

    from minisgl.spec.eagle import window_mask

    g = torch.Generator().manual_seed(seed)
    pieces = chunks(data, length)
    to_draft = torch.full((head.c.vocab_size,), -100, dtype=torch.long)  # -100: a label outside the draft vocab
    to_draft[head.vocab_ids] = torch.arange(len(head.vocab_ids))
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.05)
    losses = []
    head.train()
    for _ in tqdm(range(steps), desc="train head", disable=not progress):
        pick = torch.randint(len(pieces), (batch_size,), generator=g).tolist()
        features, tokens, positions, labels, target_features, valid = pad([pieces[i] for i in pick])
        features = features + noise * torch.randn(features.shape, generator=g)  # EAGLE: robust to its own errors
        hidden = head(features, tokens, positions, window_mask(valid, head.c.window))
        labels = torch.where(valid, to_draft[labels], -100)
        ce = F.cross_entropy(head.logits(hidden).flatten(0, 1), labels.flatten(), ignore_index=-100)
        reg = F.smooth_l1_loss(hidden[valid], target_features[valid])
        loss = ce + reg
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    head.eval()
    return losses


@torch.no_grad()
def accuracy(head, data: list[Sequence]) -> float:
    """Teacher-forced: how often the head's first guess is the target's token, over every pair of `data`."""
    from minisgl.spec.eagle import window_mask

    right = total = 0
    for features, tokens, positions, labels, _ in chunks(data, 512):
        valid = torch.ones(1, len(tokens), dtype=torch.bool)
        hidden = head(features[None], tokens[None], positions[None], window_mask(valid, head.c.window))
        right += int((head.vocab_ids[head.logits(hidden).argmax(-1)][0] == labels).sum())
        total += len(labels)
    return right / max(total, 1)


def new_head(model, config_path: Path, data: list[Sequence], vocab_size: int, window: int, seed: int = 0):
    from minisgl.models import ModelConfig
    from minisgl.spec.eagle import EagleHead, HeadConfig

    torch.manual_seed(seed)
    mc = ModelConfig.from_path(config_path)
    vocab_ids = draft_vocab(data, min(vocab_size, mc.vocab_size))
    c = HeadConfig.for_target(mc, len(vocab_ids), window)
    embed = model.model.embed_tokens.weight.detach()
    return EagleHead(c, embed, model.model.norm.weight.detach(), model.lm_head.weight.detach(), vocab_ids)


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tools.models import ensure_model

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="smollm2")
    ap.add_argument("--out", default=None, help="default: models/<target>-eagle")
    ap.add_argument("--max-new", type=int, default=160, help="answer tokens per training prompt")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--draft-vocab", type=int, default=8192)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    path = ensure_model(args.target)
    out = Path(args.out or path.parent / f"{args.target}-eagle")
    wall, cpu = time.perf_counter(), time.process_time()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    train_data = collect(model, [encode(tok, t) for t in prompts("train")], args.max_new)
    eval_data = collect(model, [encode(tok, t) for t in prompts("eval")], args.max_new)
    print(f"[draft] {sum(len(s.tokens) for s in train_data)} training positions in {time.perf_counter() - wall:.0f} s")
    head = new_head(model, path, train_data, args.draft_vocab, args.window)
    losses = train(head, train_data, args.steps, lr=args.lr)
    print(f"[draft] loss {sum(losses[:20]) / 20:.3f} -> {sum(losses[-20:]) / 20:.3f}; teacher-forced first-guess "
          f"accuracy: train {accuracy(head, train_data):.3f}, held-out {accuracy(head, eval_data):.3f}")
    head.save(out)
    print(f"[draft] saved {out} after {time.perf_counter() - wall:.0f} s wall, {time.process_time() - cpu:.0f} CPU s")


if __name__ == "__main__":
    main()
