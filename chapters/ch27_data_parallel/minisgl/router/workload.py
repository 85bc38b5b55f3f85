"""A multi-turn chat workload with shared system prompts (chapter 27): what cache-aware routing is for.

Each conversation starts from one of a few system prompts and goes on for some turns; turn k's prompt is the whole
conversation so far: the system prompt, then every user message and assistant answer before it, then the new user
message. So a conversation's prompts grow by extending each other (a prefix cache on the worker that served the
last turn holds all but the new end), and conversations that share a system prompt share its prefix. The answers
are written here, not generated, so that every prompt is known in advance and a run can be repeated exactly; the
prompts are plain text (one role per line), as /v1/completions takes them and as a router reads them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

WORDS = ("cache", "token", "batch", "page", "prefix", "router", "worker", "engine", "kernel", "request", "decode",
         "prefill", "queue", "memory", "thread", "model", "layer", "tensor", "stream", "budget", "tree", "node")


@dataclass(frozen=True)
class Turn:
    conversation: int
    turn: int  # 0, 1, ... within the conversation
    system: int  # which system prompt it starts from
    prompt: str  # the whole conversation so far, ending with "Assistant:"


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def chat_workload(conversations: int = 8, turns: int = 3, system_prompts: int = 2, system_words: int = 120,
                  user_words: int = 12, answer_words: int = 16, seed: int = 0) -> list[list[Turn]]:
    """`conversations` lists of `turns` Turns each; conversation c uses system prompt c mod `system_prompts`."""
    if min(conversations, turns, system_prompts, system_words, user_words, answer_words) < 1:
        raise ValueError("every count of the workload must be at least 1")
    rng = random.Random(seed)
    systems = [f"System: You are assistant {i}. " + " ".join(sentence(rng, 12) for _ in range(system_words // 12 + 1))
               for i in range(system_prompts)]
    out = []
    for c in range(conversations):
        s = c % system_prompts
        text, conversation = systems[s], []
        for t in range(turns):
            text += f"\nUser: {sentence(rng, user_words)}\nAssistant:"
            conversation.append(Turn(c, t, s, text))
            text += " " + sentence(rng, answer_words)  # the answer the next turn carries
        out.append(conversation)
    return out


def interleave(workload: list[list[Turn]]) -> list[Turn]:
    """One order in which a single client could send the turns: round by round (every conversation's turn 0,
    then every turn 1, ...), so that a conversation's turns come in order and others come between them."""
    rounds = max(len(c) for c in workload)
    return [c[t] for t in range(rounds) for c in workload if t < len(c)]
