"""Record what a scheduler does, step by step, from the outside: the data behind `make trace CH=N`.

Nothing here runs unless a trace is recorded. `install()` wraps `Scheduler.__init__` and
`PrefillAdder.try_add_one` in this process only; every Scheduler made afterwards gets an EngineRecorder that
listens through what the scheduler and its managers offer anyone:

    scheduler   on_batch / on_token / on_retract, and where the tree has them on_process (a launched batch's
                results are about to be recorded) and on_release (a request left: finished, aborted, retracted)
                (chained: an example that sets its own still gets its calls),
                schedule_next_batch and run_until_idle (when a step is being scheduled, when a run ends),
                add_request (the requests), prefill_manager.pending and decode_manager.running (the queues)
    engine      forward_batch / forward_verify (timing; the step itself where the tree has no on_batch yet)
    cache       allocate_paged (or chapter 7's allocate_rows), free, cache_req, free_rejected, release_paged
    radix tree  match_prefix, insert_prefix, evict; root (the tree drawn at every step)
    table       free (a request leaves its row: finished or left, told by on_release where there is one, else
                inferred from the phase), page_table / host_table (each live request's pages)
    admission   PrefillAdder.try_add_one (who was admitted, resumed, or left waiting, and why)
    proposer    accepted (how many drafts a verify step kept; the scheduler's speculation.proposer)
    admission   new_token_ratio.current (the scheduler's admission, chapter 23 on)

A step is one batch: the state when it launches (its rows, the queues, every live request's pages, the
radix tree), the events that scheduled it ("before": admissions, matches, allocations, evictions,
retractions) and the events that processed its results ("after": tokens, finished requests, prefixes
cached, pages freed). tools/trace.py runs an example under it and writes the JSON described by
docs/assets/traces/schema.json.
"""

from __future__ import annotations

import functools
import json
import runpy
import sys
import time
import traceback
from pathlib import Path
from typing import Any

TRACE_SCHEMA = "minisgl-trace"
TRACE_VERSION = 1

_installed: dict[str, Any] = {}  # what install() replaced, for uninstall()
_recorders: list["EngineRecorder"] = []
_by_table: dict[int, "EngineRecorder"] = {}  # id(TableManager) -> its recorder (PrefillAdder knows its table)


def runs(values: list[int]) -> list[list[int]]:
    """[3, 4, 5, 9, 8] -> [[3, 3], [9, 1], [8, 1]]: runs of consecutive ids as [first, count]."""
    out: list[list[int]] = []
    for v in values:
        if out and out[-1][0] + out[-1][1] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return out


def expand(spans: list[list[int]]) -> list[int]:
    return [first + k for first, count in spans for k in range(count)]


def _is_chunk(req) -> bool:
    """A prefill chunk that samples nothing (chapter 10's ChunkedReq), without importing the learner's class."""
    return type(req).__name__ == "ChunkedReq"


class _Chained:
    """A callback attribute of a traced scheduler: the recorder hears every call, then whatever the program set."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, sched, owner=None):
        if sched is None:
            return self
        hook = sched.__dict__["_trace_recorder"].callbacks[self.name]
        user = sched.__dict__.get("_trace_user_" + self.name)

        def call(*args):
            hook(*args)
            if user is not None:
                user(*args)

        return call

    def __set__(self, sched, value) -> None:
        sched.__dict__["_trace_user_" + self.name] = value


_traced_classes: dict[tuple[type, tuple[str, ...]], type] = {}


def _traced_class(cls: type, names: tuple[str, ...]) -> type:
    key = (cls, names)
    if key not in _traced_classes:
        _traced_classes[key] = type(cls.__name__, (cls,), {n: _Chained(n) for n in names} | {
            "__module__": cls.__module__, "__qualname__": cls.__qualname__})
    return _traced_classes[key]


class EngineRecorder:
    """The trace of one scheduler (one engine of the trace file)."""

    def __init__(self, sched, index: int) -> None:
        self.sched = sched
        self.index = index
        self.t0 = time.perf_counter()
        self.steps: list[dict] = []
        self.requests: dict[int, dict] = {}
        self.before: list[dict] = []  # events scheduling the next step
        self.mode = "idle"  # "sched": scheduling the next step; "proc": processing step self.proc_step
        self.proc_step = -1
        self.origin: list[str] = []  # the manager call in progress (what a freed page was freed by)
        self.awaiting: dict[int, dict[int, bool]] = {}  # step -> {uid: verify row} of rows whose token is due
        self.run_index = -1
        self.rows: dict[int, tuple] = {}  # uid -> (table row, shared prefix, pages) at the last step
        self.row_owner: dict[int, int] = {}  # table row -> uid of the request in it
        self.last_tree: list | None = None
        self.last_pages: dict[int, list] = {}
        self.last_lru: dict[int, int] = {}
        self.node_ids: dict[int, tuple[int, Any]] = {}  # id(node) -> (stable id, node kept alive)
        self.last_hit = 0  # the cached prefix the request being admitted found (its match event)
        self.evicted: list[int] | None = None  # pages the tree just evicted, until the cache manager frees them
        cache = sched.cache_manager
        self.page_size = int(getattr(cache, "page_size", 1))
        self.table = getattr(cache, "host_table", None)
        if self.table is None:
            self.table = sched.table_manager.page_table
        self.tree = getattr(cache, "prefix_cache", None)
        if self.tree is not None and not hasattr(self.tree, "root"):
            self.tree = None  # chapter 9's cache_type="naive": nothing is shared, nothing to draw
        self.callbacks = {"on_batch": self._on_batch, "on_token": self._on_token, "on_retract": self._on_retract,
                          "on_process": self._on_process, "on_release": self._on_release}
        self.step_of: dict[int, int] = {}  # id(batch) -> its step, until its results are processed
        self.left_rows: dict[int, int] = {}  # uid -> the row it just gave back, until on_release says why
        self.error: str | None = None
        self._attach()

    # ------------------------------------------------------------------ attaching
    def _attach(self) -> None:
        s = self.sched
        names = tuple(n for n in self.callbacks if n in s.__dict__)
        user = {n: s.__dict__.pop(n) for n in names}
        s.__dict__["_trace_recorder"] = self
        s.__class__ = _traced_class(type(s), names)
        for n, fn in user.items():
            setattr(s, n, fn)
        self.has_on_batch = "on_batch" in names
        self.has_on_process = "on_process" in names
        self.has_on_release = "on_release" in names
        self._wrap(s, "schedule_next_batch", self._around_schedule)
        self._wrap(s, "run_until_idle", self._around_run)
        self._wrap(s, "add_request", self._around_add)
        engine = s.engine
        self._wrap(engine, "forward_batch", self._around_forward)
        self._wrap(engine, "forward_verify", self._around_forward)
        cache = s.cache_manager
        self._wrap(cache, "allocate_paged", self._around_alloc)
        self._wrap(cache, "allocate_rows", self._around_alloc)
        self._wrap(cache, "free", self._around_free)
        for name in ("cache_req", "free_rejected", "release_paged", "release_rows"):
            self._wrap(cache, name, functools.partial(self._around_origin, name))
        if self.tree is not None:
            self._wrap(self.tree, "match_prefix", self._around_match)
            self._wrap(self.tree, "insert_prefix", self._around_insert)
            self._wrap(self.tree, "evict", self._around_evict)
        self._wrap(s.table_manager, "free", self._around_row_free)
        proposer = self._proposer()
        if proposer is not None:
            self._wrap(proposer, "accepted", self._around_accepted)
        _by_table[id(s.table_manager)] = self

    def _proposer(self):
        """The proposer of draft tokens (chapter 26: the scheduler's speculation), None without one."""
        speculation = getattr(self.sched, "speculation", None)
        return getattr(speculation, "proposer", None)

    @staticmethod
    def _wrap(obj, name: str, around) -> None:
        original = getattr(obj, name, None)
        if original is None or not callable(original):
            return

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            return around(original, *args, **kwargs)

        setattr(obj, name, wrapper)

    # ------------------------------------------------------------------ events
    def event(self, kind: str, **fields) -> None:
        ev = {"e": kind, **fields}
        if self.mode == "sched" or not self.steps:
            self.before.append(ev)
        elif self.mode == "proc":
            self.steps[self.proc_step]["after"].append(ev)
        else:
            self.steps[-1]["after"].append(ev)

    def _around_schedule(self, original, *args, **kwargs):
        self._close_verify_rows()
        self.mode = "sched"
        batch = original(*args, **kwargs)
        if batch is None:
            self.mode = "idle"  # nothing launched: its attempts stay with the step that comes next
        return batch  # with a batch, "sched" lasts until it launches: its pages are allocated on the way

    def _around_run(self, original, *args, **kwargs):
        self.run_index += 1
        try:
            return original(*args, **kwargs)
        except BaseException as e:
            self.error = f"{type(e).__name__}: {e}"
            raise
        finally:
            self._end_of_run()

    def _around_add(self, original, pending, *args, **kwargs):
        out = original(pending, *args, **kwargs)
        params = pending.sampling_params
        self.requests.setdefault(int(pending.uid), {
            "prompt": len(pending.input_ids), "max_tokens": int(params.max_tokens),
            "ids": [int(t) for t in pending.input_ids.tolist()]})
        return out

    def _around_forward(self, original, batch, *args, **kwargs):
        if not self.has_on_batch:
            self._on_batch(batch)  # chapters 7 and 8: the scheduler has no on_batch yet; this is the launch
        t = time.perf_counter()
        try:
            return original(batch, *args, **kwargs)
        finally:
            if self.steps:
                self.steps[-1]["ms"] = round(self.steps[-1].get("ms", 0) + (time.perf_counter() - t) * 1e3, 3)

    def _around_alloc(self, original, reqs, *args, **kwargs):
        spans = [(r, r.cached_len, r.device_len) for r in reqs]
        out = original(reqs, *args, **kwargs)
        given = [[int(req.uid), runs(pages)] for req, first, last in spans
                 if (pages := self._row_pages(req.table_idx, first, last, fresh=True))]
        if given:
            self.event("alloc", to=given)
        return out

    def _around_free(self, original, slots, *args, **kwargs):
        pages = [s // self.page_size for s in slots.flatten()[:: self.page_size].tolist()]
        out = original(slots, *args, **kwargs)
        if pages:
            by = "evict" if pages == self.evicted else (self.origin[-1] if self.origin else "scheduler")
            self.event("free", pages=runs(pages), by=by)
        self.evicted = None
        return out

    def _around_origin(self, name, original, *args, **kwargs):
        self.origin.append(name)
        try:
            return original(*args, **kwargs)
        finally:
            self.origin.pop()

    def _around_match(self, original, ids, *args, **kwargs):
        before = self._node_count()
        handle, slots = original(ids, *args, **kwargs)
        self.last_hit = int(handle.cached_len)
        self.event("match", len=len(ids), hit=int(handle.cached_len), node=self._node_id(handle.node),
                   split=self._node_count() - before)
        return handle, slots

    def _around_insert(self, original, ids, slots, *args, **kwargs):
        before = self._node_count()
        existed, handle = original(ids, slots, *args, **kwargs)
        leaf = int(existed) < len(ids)
        self.event("insert", len=len(ids), had=int(existed), node=self._node_id(handle.node),
                   split=self._node_count() - before - leaf)
        return existed, handle

    def _around_evict(self, original, num_slots, *args, **kwargs):
        nodes = {id(n): n for n in self._nodes()}
        self.origin.append("evict")
        try:
            slots = original(num_slots, *args, **kwargs)
        finally:
            self.origin.pop()
        gone = sorted(self._node_id(n) for k, n in nodes.items() if k not in {id(m) for m in self._nodes()})
        pages = [s // self.page_size for s in slots.flatten()[:: self.page_size].tolist()]
        self.event("evict", asked=int(num_slots), pages=runs(pages), nodes=gone)
        self.evicted = pages  # the cache manager frees them next
        return slots

    def _around_row_free(self, original, row, *args, **kwargs):
        out = original(row, *args, **kwargs)
        uid = self.row_owner.pop(int(row), None)
        if self.has_on_release and uid is not None:
            self.left_rows[uid] = int(row)  # on_release, right after, says whether it finished
        else:
            self.event("finish" if self.mode == "proc" else "leave", uid=uid, row=int(row))
        return out

    def _around_accepted(self, original, req, n, *args, **kwargs):
        out = original(req, n, *args, **kwargs)
        self.event("accept", uid=int(req.uid), kept=int(n))
        return out

    def on_admission(self, adder, pending, req, resumed: bool, before: tuple) -> None:
        budget, rows, kv, reserved = before
        if req is None:
            ps, total = self.page_size, int(getattr(pending, "slots_needed", 0))
            need = max(-(-total // ps) - -(-self.last_hit // ps), 0) * ps  # beyond the prefix it found cached
            self.event("wait", uid=int(pending.uid), budget=budget, rows=rows, kv=kv, reserved=reserved,
                       tokens=len(pending.input_ids), slots=need)
            return
        self.row_owner[int(req.table_idx)] = int(req.uid)
        kind = "resume" if resumed else "admit"
        handle = getattr(req, "cache_handle", None)
        self.event(kind, uid=int(req.uid), row=int(req.table_idx), hit=int(getattr(handle, "cached_len", 0) or 0),
                   start=int(req.cached_len), end=int(req.device_len), chunk=_is_chunk(req))

    # ------------------------------------------------------------------ callbacks
    def _on_batch(self, batch) -> None:
        self._close_verify_rows()
        k = len(self.steps)
        step = {"i": k, "run": max(self.run_index, 0), "t": round((time.perf_counter() - self.t0) * 1e3, 3),
                "phase": batch.phase, "rows": [self._row(batch, j, r) for j, r in enumerate(batch.reqs)]}
        step.update(self._state({r.uid: r.device_len for r in batch.reqs}, batch.reqs))
        step["before"], self.before = self.before, []
        step["after"], step["tokens"] = [], {}
        self.steps.append(step)
        self.step_of[id(batch)] = k
        self.awaiting[k] = {int(r.uid): batch.phase == "verify" for r in batch.reqs if not _is_chunk(r)}
        for r in batch.reqs:
            self.row_owner[int(r.table_idx)] = int(r.uid)
        self.mode = "run"

    def _row(self, batch, j: int, r) -> dict:
        prefill_rows = batch.num_prefill if getattr(batch, "num_prefill", None) is not None else (
            len(batch.reqs) if batch.phase == "prefill" else 0)
        kind = ("chunk" if _is_chunk(r) else "prefill") if j < prefill_rows else (
            "verify" if batch.phase == "verify" else "decode")
        row = {"uid": int(r.uid), "kind": kind, "from": int(r.cached_len), "to": int(r.device_len),
               "table": int(r.table_idx)}
        drafts = getattr(batch, "drafts", None)
        if batch.phase == "verify" and drafts is not None:
            row["drafts"] = [int(t) for t in drafts[0][j]]
        return row

    def _on_token(self, req, token) -> None:
        uid = int(req.uid)
        step = next((k for k in sorted(self.awaiting) if uid in self.awaiting[k]), None)
        if step is None:  # a token the recorder did not see launched (a program that calls the hook itself)
            return
        self.steps[step]["tokens"].setdefault(str(uid), []).append(int(token))
        if not self.awaiting[step][uid]:
            del self.awaiting[step][uid]
        if not self.has_on_process:
            self.mode, self.proc_step = "proc", step  # inferred: this step's results are being processed

    def _on_process(self, batch) -> None:
        """The results of a launched batch are about to be recorded: what follows belongs to its step."""
        step = self.step_of.pop(id(batch), None)
        if step is not None:
            self.mode, self.proc_step = "proc", step

    def _on_release(self, req, reason: str) -> None:
        """A request left: "finished" (its row freed as it finished), "aborted" or "retracted" (it left its row)."""
        row = self.left_rows.pop(int(req.uid), None)
        if row is not None:
            self.event("finish" if reason == "finished" else "leave", uid=int(req.uid), row=row)

    def _flush_left_rows(self) -> None:
        """Rows given back without an on_release (abort_all when a run fails): the requests left."""
        for uid, row in self.left_rows.items():
            self.event("leave", uid=uid, row=row)
        self.left_rows.clear()

    def _on_retract(self, req) -> None:
        uid = int(req.uid)
        for k, due in self.awaiting.items():
            if due.pop(uid, None) is not None:
                self.steps[k].setdefault("dropped", []).append(uid)
        self.event("retract", uid=uid, generated=int(req.device_len - req.prompt_len), known=len(req.input_ids))

    def _close_verify_rows(self) -> None:
        """A verify row gains a run of tokens: its step stops taking them once the next step is scheduled."""
        for k in list(self.awaiting):
            self.awaiting[k] = {u: v for u, v in self.awaiting[k].items() if not v}
            if not self.awaiting[k]:
                del self.awaiting[k]

    def _end_of_run(self) -> None:
        """The state once the run is over (every result processed), as a step of phase "idle"."""
        self._flush_left_rows()
        self.step_of.clear()
        for k, due in self.awaiting.items():
            left = [u for u, verify in due.items() if not verify or str(u) not in self.steps[k]["tokens"]]
            if left:
                self.steps[k].setdefault("dropped", []).extend(left)  # launched, result never used
        self.awaiting.clear()
        step = {"i": len(self.steps), "run": max(self.run_index, 0),
                "t": round((time.perf_counter() - self.t0) * 1e3, 3), "phase": "idle", "rows": []}
        step.update(self._state({}, []))
        step["before"], self.before = self.before, []
        step["after"], step["tokens"] = [], {}
        if self.error:
            step["error"] = self.error
        self.steps.append(step)
        self.mode = "idle"

    # ------------------------------------------------------------------ state
    def _state(self, in_batch: dict[int, int], batch_reqs: list) -> dict:
        """Queues, pages and tree now. Pages are stored as changes since the step before (see the schema)."""
        s = self.sched
        waiting = []
        for p in s.prefill_manager.pending:
            chunked = getattr(p, "chunked_req", None)
            waiting.append([int(p.uid), int(chunked.cached_len) if chunked is not None else 0, len(p.input_ids)])
        running = [int(r.uid) for r in s.decode_manager.running]
        live = {int(r.uid): r for r in s.decode_manager.running}
        live.update((int(p.chunked_req.uid), p.chunked_req) for p in s.prefill_manager.pending
                    if getattr(p, "chunked_req", None) is not None)
        live.update((int(r.uid), r) for r in batch_reqs)
        rows = {}
        for uid, r in live.items():
            end = in_batch.get(uid, r.cached_len)  # a batch's rows hold pages up to device_len once allocated
            handle = getattr(r, "cache_handle", None)
            shared = int(getattr(handle, "cached_len", 0) or 0)
            rows[uid] = (int(r.table_idx), shared, self._row_pages(r.table_idx, 0, end))
        changed = [[uid, *self._row_change(uid, rows[uid])] for uid in sorted(rows) if rows[uid] != self.rows.get(uid)]
        changed += [[uid, None] for uid in sorted(set(self.rows) - set(rows))]
        self.rows = rows
        cache = s.cache_manager
        evictable = int(self.tree.evictable_size) if self.tree is not None else 0
        state = {"waiting": waiting, "running": running, "pages": changed,
                 "free": (int(cache.available_size) - evictable) // self.page_size}
        admission = getattr(s, "admission", None)
        if getattr(admission, "optimistic", False):  # chapter 23: the share of what running requests may still write
            state["ratio"] = round(float(admission.new_token_ratio.current), 4)
        if self.tree is not None:
            state.update(self._tree_changes())
        return state

    def _row_change(self, uid: int, new: tuple) -> list:
        """[table row, shared prefix tokens, index of the first page that changed, its pages from there]."""
        old = self.rows.get(uid)
        start = 0
        if old is not None and old[0] == new[0]:
            while start < min(len(old[2]), len(new[2])) and old[2][start] == new[2][start]:
                start += 1
            if start == len(new[2]) and len(old[2]) > len(new[2]):
                start = len(new[2])
        return [new[0], new[1], start, runs(new[2][start:]), len(new[2])]

    def _row_pages(self, row: int, first: int, last: int, fresh: bool = False) -> list[int]:
        """Pages of a page-table row for positions [first, last): one per page (whole pages)."""
        ps = self.page_size
        start = -(-first // ps) * ps if fresh else first - first % ps
        end = -(-last // ps) * ps
        if end <= start:
            return []
        return [s // ps for s in self.table[row, start:end:ps].tolist()]

    def _nodes(self) -> list:
        out, stack = [], list(self.tree.root.children.values()) if self.tree is not None else []
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out

    def _node_count(self) -> int:
        return len(self._nodes())

    def _node_id(self, node) -> int:
        if node is None or self.tree is None or node is self.tree.root:
            return 0
        if id(node) not in self.node_ids:
            self.node_ids[id(node)] = (len(self.node_ids) + 1, node)
        return self.node_ids[id(node)][0]

    def _tree_changes(self) -> dict:
        """The radix tree as changes since the step before: "tree" (every node but the root, parents first:
        [id, parent id, tokens, ref count, first tokens]) when a node came, went or changed its lock count;
        "tree_pages" ({id: page runs}) for nodes whose pages are new or changed (a split cuts a node's pages);
        "lru" ({id: last access}) for nodes touched since."""
        nodes, pages, lru = [], {}, {}
        stack = [(n, 0) for n in self.tree.root.children.values()]
        while stack:
            node, parent = stack.pop(0)
            nid = self._node_id(node)
            nodes.append([nid, parent, len(node.key), int(node.ref_count), [int(t) for t in list(node.key[:4])]])
            on_device = node.value if node.value is not None else []  # chapter 28: a node kept on the host only
            pages[nid] = runs([int(s) // self.page_size for s in on_device[:: self.page_size]])
            lru[nid] = int(getattr(node, "last_access", 0))
            stack.extend((c, nid) for c in node.children.values())
        nodes.sort(key=lambda n: n[0])
        out: dict = {}
        if nodes != self.last_tree:
            out["tree"] = self.last_tree = nodes
        changed = {str(k): v for k, v in pages.items() if self.last_pages.get(k) != v}
        if changed:
            out["tree_pages"] = changed
        touched = {str(k): v for k, v in lru.items() if self.last_lru.get(k) != v}
        if touched:
            out["lru"] = touched
        self.last_pages, self.last_lru = pages, lru
        return out

    # ------------------------------------------------------------------ output
    def config(self) -> dict:
        s, engine = self.sched, self.sched.engine
        cfg = engine.config
        spec = self._setting("speculative", None)
        return {
            "model": Path(str(cfg.model_path)).name,
            "page_size": self.page_size,
            "num_pages": int(getattr(s.cache_manager, "num_pages", getattr(s.cache_manager, "num_slots", 0))),
            "max_running_reqs": int(cfg.max_running_reqs),
            "max_extend_tokens": int(self._setting("max_extend_tokens", 0)),
            "cache_type": str(getattr(cfg, "cache_type", "none")),
            "overlap": bool(self._setting("overlap", False)),
            "mixed": bool(self._setting("enable_mixed_chunk", False)),
            "admission": str(self._setting("admission", "conservative")),
            "speculative": None if spec is None else f"{spec.method}, k={spec.num_tokens}",
        }

    def _setting(self, name: str, default):
        """A field of the scheduler's SchedulerConfig; `default` for a chapter that does not have it yet."""
        return getattr(self.sched.config, name, default)

    def to_json(self, vocab: dict[int, str]) -> dict:
        requests = {}
        for uid, info in sorted(self.requests.items()):
            requests[str(uid)] = {"prompt": info["prompt"], "max_tokens": info["max_tokens"],
                                  "text": vocab.get(("prompt", uid), "")}
        return {"index": self.index, "config": self.config(), "features": self.features(),
                "requests": requests, "steps": self.steps}

    def features(self) -> list[str]:
        s = self.sched
        out = []
        if self.tree is not None:
            out.append("radix")
        if hasattr(s, "on_retract"):
            out.append("retract")
        if self._proposer() is not None:
            out.append("spec")
        if self._setting("overlap", False):
            out.append("overlap")
        return out


# ---------------------------------------------------------------------- install / run
def install() -> None:
    """Trace every Scheduler made from now on in this process."""
    if _installed:
        return
    from minisgl.scheduler import prefill, scheduler

    init, try_add_one = scheduler.Scheduler.__init__, prefill.PrefillAdder.try_add_one

    @functools.wraps(init)
    def traced_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if "_trace_recorder" not in self.__dict__:  # once, even if a subclass's __init__ runs this one
            _recorders.append(EngineRecorder(self, len(_recorders)))

    @functools.wraps(try_add_one)
    def traced_try_add_one(adder, pending):
        rec = _by_table.get(id(adder.table))
        if rec is None:
            return try_add_one(adder, pending)
        before = (int(adder.token_budget), int(adder.table.available_size), int(adder.cache.available_size),
                  int(adder.reserved))
        resumed = getattr(pending, "chunked_req", None) is not None
        rec.last_hit = 0
        req = try_add_one(adder, pending)
        rec.on_admission(adder, pending, req, resumed, before)
        return req

    _installed.update(init=(scheduler.Scheduler, init), add=(prefill.PrefillAdder, try_add_one))
    scheduler.Scheduler.__init__ = traced_init
    prefill.PrefillAdder.try_add_one = traced_try_add_one


def uninstall() -> None:
    """Undo install(): classes as they were, no recorder kept."""
    if not _installed:
        return
    cls, init = _installed["init"]
    cls.__init__ = init
    cls, add = _installed["add"]
    cls.try_add_one = add
    _installed.clear()
    _recorders.clear()
    _by_table.clear()


def _vocab(recorders: list[EngineRecorder]) -> dict:
    """Text of every output token and the start of every prompt, from the model's tokenizer (best effort)."""
    out: dict = {}
    if not recorders:
        return out
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(recorders[0].sched.engine.config.model_path))
    except Exception:  # a model folder without a tokenizer: ids only
        return out
    ids = {int(t) for r in recorders for s in r.steps for ts in s["tokens"].values() for t in ts}
    ids |= {d for r in recorders for s in r.steps for row in s["rows"] for d in row.get("drafts", [])}
    ids |= {t for r in recorders for s in r.steps for node in s.get("tree", []) for t in node[4]}
    for t in sorted(ids):
        out[t] = tok.decode([t])
    for r in recorders:
        for uid, info in r.requests.items():
            out[("prompt", uid)] = tok.decode(info["ids"], skip_special_tokens=True)[-80:]
    return out


def trace_document(meta: dict, exit_code: int, error: str | None) -> dict:
    vocab = _vocab(_recorders)
    return {"schema": TRACE_SCHEMA, "version": TRACE_VERSION, **meta,
            "exit": {"code": exit_code, "error": error},
            "vocab": {str(k): v for k, v in vocab.items() if isinstance(k, int)},
            "engines": [r.to_json(vocab) for r in _recorders]}


def record_script(script: Path, out: Path, meta: dict) -> int:
    """Run a program (an example) with every scheduler it makes traced; write the trace even if it fails."""
    install()
    code, error = 0, None
    argv = sys.argv
    sys.argv = [str(script)]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException as e:  # the learner's stub, a failing assert: the trace up to there is the point
        traceback.print_exc()
        code, error = 1, f"{type(e).__name__}: {e}"
    finally:
        sys.argv = argv
    doc = trace_document(meta, code, error)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, separators=(",", ":"), ensure_ascii=False))
    return code


if __name__ == "__main__":  # python -m tools.trace_recorder OUT SCRIPT META_JSON (tools/trace.py runs it on a tree)
    raise SystemExit(record_script(Path(sys.argv[2]), Path(sys.argv[1]), json.loads(sys.argv[3])))
