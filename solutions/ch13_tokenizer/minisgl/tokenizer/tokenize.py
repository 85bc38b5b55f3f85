"""TokenizeManager: a prompt (text, chat messages or token ids) to the token ids the engine runs, checked first."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

Prompt = str | Sequence[Mapping[str, str]] | Sequence[int]
ROLES = ("system", "user", "assistant")


class TokenizeManager:
    """Turns prompts into token ids with the model's tokenizer. `max_prompt_len` (optional) is the longest
    prompt the engine accepts; `vocab_size` (optional) the model's, which bounds token-id prompts (default: the
    tokenizer's size, added special tokens included). Every failure is a ValueError that names the problem."""

    def __init__(self, tokenizer, max_prompt_len: int | None = None, vocab_size: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.max_prompt_len = max_prompt_len
        self.vocab_size = len(tokenizer) if vocab_size is None else vocab_size

    def tokenize(self, prompt: Prompt) -> list[int]:
        """Text is encoded as is; a list of {"role", "content"} messages goes through the chat template with the
        assistant's turn opened (the ids equal `apply_chat_template(..., add_generation_prompt=True)`); token ids
        (a list, or a numpy array or torch tensor) are checked and passed through."""
        # TODO(ch13): render chat messages with the model's chat template (generation prompt added, then encoded
        # without adding special tokens again), encode text, pass token ids through; refuse an empty prompt,
        # a malformed message, an id outside the vocabulary, or a prompt longer than max_prompt_len.
        # >>> solution
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt)
        elif len(prompt) > 0 and all(isinstance(m, Mapping) for m in prompt):
            ids = self._encode_chat(prompt)
        else:
            ids = self._check_ids(prompt)
        if not ids:
            raise ValueError("the prompt is empty")
        if self.max_prompt_len is not None and len(ids) > self.max_prompt_len:
            raise ValueError(f"the prompt has {len(ids)} tokens, more than the {self.max_prompt_len} allowed")
        return ids
        # <<< solution

    def _encode_chat(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        for i, m in enumerate(messages):
            if m.get("role") not in ROLES or not isinstance(m.get("content"), str):
                raise ValueError(f"message {i} needs a role in {ROLES} and a text content, got {dict(m)!r}")
        text = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
        return self.tokenizer.encode(text, add_special_tokens=False)  # the template wrote the special tokens

    def _check_ids(self, ids: Sequence[int]) -> list[int]:
        if hasattr(ids, "tolist"):  # a numpy array or a torch tensor of ids
            ids = ids.tolist()
        if isinstance(ids, (bytes, bytearray)) or not isinstance(ids, Sequence):
            raise ValueError(f"a prompt is text, chat messages or token ids, got {type(ids).__name__}")
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, numbers.Integral) or not 0 <= t < self.vocab_size:
                raise ValueError(f"token id {t!r} is not an integer in [0, {self.vocab_size})")
        return [int(t) for t in ids]
