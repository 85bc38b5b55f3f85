"""Compare two traces step by step (what `make trace` prints, and what the book's trace player shows).

A step's signature is what the engine decided, never how fast or where in memory: the batch (each row's
request, kind and token range, drafts), the tokens it produced, the queues, how many pages each live request
holds and how many are free, the radix tree's shape and lock counts, and the events (admissions with their
cache hits, requests left waiting, retractions, finishes, evictions, kept drafts, inserts). Page ids and
timings are left out: two correct allocators may hand out different pages. The player's diff view
(docs/assets/javascripts/trace-player.js, `signature`) computes the same fields.
"""

from __future__ import annotations

from typing import Any

FIELDS = ("phase", "batch", "tokens", "waiting", "running", "pages", "free", "tree", "events")


def replay(engine: dict) -> list[dict[int, tuple]]:
    """Every live request's (table row, shared prefix tokens, pages) at each step, from the stored changes."""
    rows: dict[int, tuple] = {}
    out = []
    for step in engine["steps"]:
        rows = dict(rows)
        for change in step.get("pages", []):
            uid = change[0]
            if change[1] is None:
                rows.pop(uid, None)
                continue
            table, shared, start, spans, total = change[1:6]
            prev = rows.get(uid)
            old = prev[2] if prev is not None and prev[0] == table else []
            pages = old[:start] + [first + k for first, count in spans for k in range(count)]
            rows[uid] = (table, shared, pages[:total])
        out.append(rows)
    return out


def trees(engine: dict) -> list[list]:
    """The radix tree at each step (a step stores it only when it changed)."""
    tree: list = []
    out = []
    for step in engine["steps"]:
        tree = step.get("tree", tree)
        out.append(tree)
    return out


def tree_shape(nodes: list) -> Any:
    """The tree without node ids, page ids or clocks: (tokens, locks, children...), children in a fixed order."""
    children: dict[int, list] = {}
    for node in nodes:
        children.setdefault(node[1], []).append(node)

    def shape(nid: int) -> tuple:
        kids = sorted((node[2], node[3], node[4], shape(node[0])) for node in children.get(nid, []))
        return tuple(kids)

    return shape(0)


def event_summary(events: list[dict]) -> list[str]:
    out = []
    for ev in events:
        kind = ev["e"]
        if kind in ("admit", "resume"):
            out.append(f"{kind} {ev['uid']} [{ev['start']}:{ev['end']}] hit {ev['hit']}")
        elif kind in ("wait", "retract", "finish", "leave"):
            out.append(f"{kind} {ev['uid']}")
        elif kind == "evict":
            out.append(f"evict {sum(c for _, c in ev['pages'])} pages")
        elif kind == "accept":
            out.append(f"accept {ev['uid']} kept {ev['kept']}")
        elif kind == "insert":
            out.append(f"insert {ev['len']} had {ev['had']}")
        elif kind == "match":
            out.append(f"match {ev['len']} hit {ev['hit']}")
    return out


def signature(step: dict, rows: dict[int, tuple], tree: list) -> dict[str, Any]:
    return {
        "phase": step["phase"],
        "batch": [f"{r['uid']}[{r['from']}:{r['to']}] {r['kind']}" + (f" +{len(r['drafts'])} drafts" if r.get("drafts")
                                                                        else "") for r in step["rows"]],
        "tokens": {int(k): v for k, v in sorted(step.get("tokens", {}).items(), key=lambda kv: int(kv[0]))},
        "waiting": [f"{u} {done}/{total}" for u, done, total in step.get("waiting", [])],
        "running": list(step.get("running", [])),
        "pages": {uid: len(pages) for uid, (_, _, pages) in sorted(rows.items())},
        "free": step.get("free"),
        "tree": tree_shape(tree),
        "events": event_summary(step.get("before", []) + step.get("after", [])),
    }


def signatures(engine: dict) -> list[dict[str, Any]]:
    return [signature(s, r, t) for s, r, t in zip(engine["steps"], replay(engine), trees(engine))]


def engine_label(engine: dict) -> str:
    c = engine["config"]
    parts = [f"page_size={c['page_size']}", f"cache_type={c['cache_type']}"]
    if c.get("max_extend_tokens"):
        parts.append(f"max_extend_tokens={c['max_extend_tokens']}")
    for key in ("overlap", "mixed"):
        if c.get(key):
            parts.append(f"{key}=on")
    if c.get("admission", "conservative") != "conservative":
        parts.append(f"admission={c['admission']}")
    if c.get("speculative"):
        parts.append(f"speculative={c['speculative']}")
    return ", ".join(parts)


def first_difference(mine: dict, ref: dict) -> dict | None:
    """The first step (engine by engine) where the two traces differ: {engine, step, fields: {name: (mine, ref)}};
    a missing engine or step counts as a difference. None when every step agrees."""
    for e in range(max(len(mine["engines"]), len(ref["engines"]))):
        if e >= len(mine["engines"]) or e >= len(ref["engines"]):
            return {"engine": e, "step": 0, "fields": {"engine": (
                "present" if e < len(mine["engines"]) else "missing",
                "present" if e < len(ref["engines"]) else "missing")}}
        a, b = signatures(mine["engines"][e]), signatures(ref["engines"][e])
        for i in range(max(len(a), len(b))):
            if i >= len(a) or i >= len(b):
                return {"engine": e, "step": i, "fields": {"step": (
                    "present" if i < len(a) else "missing (the run stopped)",
                    "present" if i < len(b) else "missing")}}
            fields = {k: (a[i][k], b[i][k]) for k in FIELDS if a[i][k] != b[i][k]}
            if fields:
                return {"engine": e, "step": i, "fields": fields}
    return None
