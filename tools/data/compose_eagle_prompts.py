"""Compose chapter 26's training prompts for `make draft`: the hand-written ones plus templates x topics.

    python tools/data/compose_eagle_prompts.py   # rewrites tools/data/eagle_prompts.json ("eval" kept as it is)

A head learns what the target tends to say; varied requests (explain, list, write, compare, advise) over many
topics give it varied answers. The held-out "eval" prompts are never in "train", and no topic below is one of theirs.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

FILE = Path(__file__).with_name("eagle_prompts.json")

THINGS = ["a volcano", "the human heart", "a solar panel", "a lighthouse", "honeybees", "the printing press",
          "a thunderstorm", "coral reefs", "the Roman empire", "a steam engine", "penguins", "a microwave oven",
          "the stock market", "glaciers", "the immune system", "a battery", "owls", "the Great Wall of China",
          "a vaccine", "deserts", "a piano", "electric cars", "tea", "coffee", "the Olympic Games", "earthworms",
          "a telescope", "the moon landing", "rainforests", "a bridge", "dinosaurs", "the post office", "chocolate",
          "a submarine", "wind turbines", "the brain", "a hurricane", "libraries", "elephants", "a windmill",
          "the alphabet", "paper money", "a satellite", "mushrooms", "the Nile river", "bread", "a jet engine",
          "sharks", "the calendar", "a clock", "snow", "cheese", "a guitar", "the metric system", "spiders",
          "the first computers", "an orchestra", "salt", "a hospital", "the Amazon river"]
ACTIVITIES = ["learning to swim", "starting a vegetable garden", "running a first marathon", "moving to a new city",
              "cooking for a large family", "learning to play the guitar", "keeping a journal", "training a dog",
              "painting with watercolors", "organizing a small kitchen", "hosting a dinner party", "learning to code",
              "saving for a holiday", "starting a book club", "going on a first hike", "working from home",
              "teaching a child to ride a bike", "writing a first novel", "planning a wedding", "making new friends",
              "speaking in public", "taking better photos", "sleeping better", "drinking more water",
              "reducing screen time", "preparing for a job interview", "baking sourdough bread", "fixing a flat tire",
              "decorating a small apartment", "learning to draw"]
PEOPLE = ["a neighbor", "a grandmother", "a new colleague", "a coach", "a landlord", "a best friend", "a doctor",
          "a librarian", "a younger brother", "a former teacher", "a customer", "a pen pal"]
OCCASIONS = ["thanking them for their help", "inviting them to a picnic", "congratulating them on a new job",
             "asking to reschedule an appointment", "wishing them a happy birthday", "welcoming them to the team",
             "apologizing for a late reply", "asking for a recommendation"]

THING_TEMPLATES = ["Explain how {x} works.", "Tell me three interesting facts about {x}.",
                   "Write a short poem about {x}.", "Describe {x} to a child.", "What is the history of {x}?",
                   "Why is {x} important?", "Write a short story that involves {x}.",
                   "What are common misconceptions about {x}?", "Give me a short quiz about {x} with answers.",
                   "Summarize what scientists know about {x}."]
ACTIVITY_TEMPLATES = ["Give me tips for {x}.", "What are the first steps in {x}?", "What mistakes should I avoid "
                      "when {x}?", "Make a one-week plan for {x}.", "Why is {x} worth trying?"]
PAIR_TEMPLATES = ["What is the difference between {x} and {y}?", "Compare {x} and {y} in a short table."]


def compose(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = [t.format(x=x) for x in THINGS for t in rng.sample(THING_TEMPLATES, 5)]
    out += [t.format(x=x) for x in ACTIVITIES for t in rng.sample(ACTIVITY_TEMPLATES, 3)]
    out += [f"Write a short note to {p}, {o}." for p in PEOPLE for o in rng.sample(OCCASIONS, 3)]
    for _ in range(40):
        x, y = rng.sample(THINGS, 2)
        out.append(rng.choice(PAIR_TEMPLATES).format(x=x, y=y))
    return out


def main() -> None:
    data = json.loads(FILE.read_text())
    hand = data["train"][:60]  # the hand-written prompts come first
    train = list(dict.fromkeys(hand + compose()))
    held_out = set(data["eval"])
    data["train"] = [p for p in train if p not in held_out]
    FILE.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    print(f"{len(data['train'])} training prompts, {len(data['eval'])} held out")


if __name__ == "__main__":
    main()
