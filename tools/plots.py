"""Plots the examples draw from real runs (matplotlib, written as PNG under build/plots/).

`python -m tools.course outputs` copies them to docs/assets/images/, where the book shows them.
"""

from __future__ import annotations

from pathlib import Path

from tools.tree import BUILD

PLOTS = BUILD / "plots"
# What a request did in one batch -> its colour in the timeline.
KINDS = {"chunk": ("#f4a259", "prefill chunk"), "prefill": ("#bc4b51", "prefill (last piece)"),
         "decode": ("#5b8e7d", "decode")}


def draw_timeline(batches: list[list[tuple[int, str]]], name: str, title: str) -> Path:
    """One row per request, one column per batch: a cell is coloured by what the request did in that batch.

    batches[i] lists (uid, kind) for every request of batch i, kind one of KINDS. Returns the PNG's path.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    uids = sorted({uid for batch in batches for uid, _ in batch})
    fig, ax = plt.subplots(figsize=(min(2 + 0.14 * len(batches), 14), 0.9 + 0.32 * len(uids)))
    for step, batch in enumerate(batches):
        for uid, kind in batch:
            ax.add_patch(plt.Rectangle((step, uids.index(uid) - 0.4), 0.92, 0.8, color=KINDS[kind][0], lw=0))
    ax.set_xlim(0, len(batches))
    ax.set_ylim(len(uids) - 0.5, -0.5)
    ax.set_yticks(range(len(uids)), [f"request {u}" for u in uids])
    ax.set_xlabel("batch (scheduler step)")
    ax.set_title(title, fontsize=10)
    ax.legend(handles=[Patch(color=c, label=label) for c, label in KINDS.values()], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    PLOTS.mkdir(parents=True, exist_ok=True)
    path = PLOTS / f"{name}.png"
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path
