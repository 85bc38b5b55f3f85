// The trace player: plays a trace of `make trace CH=N` (format: assets/traces/schema.json) step by step.
//
// Any element with class "trace-player" becomes a player. data-trace="ch10" loads the book's reference trace
// assets/traces/ch10.json; data-step / data-engine pick where it opens; data-open adds the file inputs (open a
// trace, compare with another) and drag and drop; data-examples="ch09 ch10" lists reference traces to load with
// one click. On the player page, ?trace=ch10&engine=0&step=5 opens a reference trace there.
//
// A step shows the batch, the queues, the KV pool as a grid of pages (who holds each), the page-table rows,
// the radix tree (drawn, moving from step to step) and what happened around the step. With a second trace the
// player compares them step by step (the same fields as tools/trace_diff.py) and jumps to the first difference.
(function () {
  "use strict";

  const ROOT = new URL("../../", document.currentScript.src); // the site's root (this file is assets/javascripts/)
  const SVG = "http://www.w3.org/2000/svg";
  const ZH_TEXT = {
    "Open a trace": "打开 trace", "or drop a trace file here": "或把 trace 文件拖到这里",
    "Compare with": "对比",
    "new-token ratio {r}: running requests reserve this share of what they may still write":
      "new-token ratio {r}：运行中的请求按这个比例为它们之后可能写入的 KV 预留空间", "Reference traces": "参考 trace", "engine": "引擎", "step": "步",
    "Play": "播放", "Pause": "暂停", "First step": "第一步", "Previous step": "上一步", "Next step": "下一步",
    "Last step": "最后一步", "steps/s": "步/秒", "run": "run",
    "Batch": "Batch", "Queues": "队列", "KV pool": "KV pool", "Page table": "页表", "Radix tree": "Radix tree",
    "What happened": "这一步发生了什么", "waiting": "等待", "running": "运行中", "(empty)": "（空）",
    "request": "请求", "kind": "类型", "positions": "位置", "tokens": "token",
    "free": "空闲", "cached": "已缓存", "cached, locked": "已缓存（锁定）", "held by request {u}": "请求 {u} 持有",
    "conflict": "冲突",
    "pages {a}..{b} (never used) are free": "第 {a}..{b} 页（从未用到）空闲",
    "{n} pages, page size {s}": "共 {n} 页，页大小 {s}",
    "The cache manager counts {a} free pages; the rows and the tree leave {b} unclaimed.":
      "cache manager 记的空闲页是 {a}，而请求行和 radix tree 之外剩下 {b} 页。",
    "no radix tree in this engine (chapter 9 adds it; cache_type=naive shares nothing)":
      "这个引擎没有 radix tree（第 9 章加入；cache_type=naive 不共享前缀）",
    "the tree is empty": "树是空的",
    "no live request holds a row": "没有请求占着页表行",
    "row {r} · request {u}": "第 {r} 行 · 请求 {u}",
    "{n} prefix pages shared with the tree": "前 {n} 页与 radix tree 共享",
    "forward pass {ms} ms, at {t} s": "前向 {ms} ms，时刻 {t} s",
    "the state after the run ended": "这次 run 结束之后的状态",
    "Scheduled:": "调度：", "Ran and processed:": "运行与结果处理：", "Tokens:": "token：",
    "nothing": "无",
    "admitted request {u} into row {r}: {hit} tokens found in the radix tree, computes [{a}:{b}]{c}":
      "请求 {u} 被准入，占第 {r} 行：radix tree 里命中 {hit} 个 token，计算 [{a}:{b}]{c}",
    " (a chunk)": "（一个分块）",
    "request {u} continues its prompt: [{a}:{b}]{c}": "请求 {u} 继续它的 prompt：[{a}:{b}]{c}",
    "request {u} waits: the token budget is spent": "请求 {u} 等待：token 预算已用完",
    "request {u} waits: no free row": "请求 {u} 等待：没有空闲的行",
    "request {u} waits: needs {n} KV slots, {kv} available, {res} reserved for running requests":
      "请求 {u} 等待：需要 {n} 个 KV slot，可用 {kv}，已为运行中的请求预留 {res}",
    "request {u} waits: its prompt ({n} tokens) is over the budget left ({b})":
      "请求 {u} 等待：prompt（{n} 个 token）超过剩余预算（{b}）",
    "request {u} gets pages {p}": "请求 {u} 拿到页 {p}",
    "pages {p} freed ({by})": "页 {p} 被释放（{by}）",
    "radix match of {n} tokens: {hit} cached (node {node}){s}": "radix 匹配 {n} 个 token：命中 {hit} 个（节点 {node}）{s}",
    "radix insert of {n} tokens: {had} already there (node {node}){s}":
      "radix 插入 {n} 个 token：其中 {had} 个已在树里（节点 {node}）{s}",
    ", {k} node split": "，拆分 {k} 个节点",
    "evicted {n} pages ({p}): nodes {nodes}": "驱逐 {n} 页（{p}）：节点 {nodes}",
    "request {u} finished: row {r} freed": "请求 {u} 结束：第 {r} 行释放",
    "request {u} left row {r}": "请求 {u} 离开第 {r} 行",
    "request {u} retracted after {g} tokens: waits again with {k} tokens to prefill":
      "请求 {u} 在生成 {g} 个 token 后被撤回：带着 {k} 个 token 重新排队等 prefill",
    "request {u} kept {k} drafts": "请求 {u} 保留了 {k} 个 draft",
    "result of request {u} thrown away (it had finished or was retracted)":
      "请求 {u} 这一步的结果被丢弃（它已结束或已被撤回）",
    "the run stopped: {e}": "run 中途停止：{e}",
    "drafts {d}": "draft {d}",
    "Not a trace file: {m}": "不是 trace 文件：{m}",
    "This is a trace of version {v}; this player reads version 1.": "这是版本 {v} 的 trace；播放器只读版本 1。",
    "cannot load {f}: {m}": "无法加载 {f}：{m}",
    "yours": "你的", "reference": "参考",
    "Every step agrees.": "每一步都一致。",
    "First difference: engine {e}, step {s} ({f}).": "第一处差异：引擎 {e}，第 {s} 步（{f}）。",
    "Jump to it": "跳过去",
    "missing": "缺失",
    "field": "字段", "phase": "阶段", "batch": "batch", "pages": "页", "tree": "树", "events": "事件",
    "chapter {c}, {tree} tree": "第 {c} 章 · 代码树：{tree}",
    "the example stopped: {e}": "示例中途停止：{e}",
    "drop a second trace on 'Compare with' to see where they differ": "再在“对比”里放一个 trace，就能看到两者哪里不同",
    "learner": "学习者（默认）", "mine": "你的全部代码（MINE=1）", "test": "测试",
  };
  const ZH = (document.documentElement.lang || "en").startsWith("zh");
  function t(text, fields) {
    const s = (ZH && ZH_TEXT[text]) || text;
    return s.replace(/\{(\w+)\}/g, (m, k) => (fields && k in fields ? fields[k] : m));
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }
  const expand = (spans) => spans.flatMap(([a, n]) => Array.from({ length: n }, (_, k) => a + k));
  function spanText(spans) {
    return spans.map(([a, n]) => (n === 1 ? `${a}` : `${a}–${a + n - 1}`)).join(", ");
  }
  function runsOf(ids) {
    const out = [];
    for (const v of ids) {
      const last = out[out.length - 1];
      if (last && last[0] + last[1] === v) last[1]++;
      else out.push([v, 1]);
    }
    return out;
  }
  // Button icons drawn in SVG (no icon font: the glyphs of media keys are missing from many fonts).
  const ICONS = {
    first: "M3 2h2v12H3zM14 2v12L6 8z", prev: "M12 2v12L4 8z", play: "M4 2v12l10-6z",
    pause: "M4 2h3v12H4zM9 2h3v12H9z", next: "M4 2v12l8-6z", last: "M11 2h2v12h-2zM2 2v12l8-6z",
  };
  function iconSvg(name) {
    const icon = svg("svg", { viewBox: "0 0 16 16", width: 14, height: 14, "aria-hidden": "true" });
    icon.append(svg("path", { d: ICONS[name], fill: "currentColor" }));
    return icon;
  }
  const uidColor = (uid) => `hsl(${(uid * 137.508) % 360}, 62%, 52%)`;

  // ------------------------------------------------------------------ the trace, step by step
  function check(doc) {
    if (!doc || doc.schema !== "minisgl-trace" || !Array.isArray(doc.engines)) {
      throw new Error(t("Not a trace file: {m}", { m: "schema ≠ minisgl-trace" }));
    }
    if (doc.version !== 1) throw new Error(t("This is a trace of version {v}; this player reads version 1.", { v: doc.version }));
    for (const e of doc.engines) {
      if (!e.config || !Array.isArray(e.steps)) throw new Error(t("Not a trace file: {m}", { m: "engine without steps" }));
    }
    return doc;
  }

  // Every live request's {table, shared, pages} at each step (the steps store only the rows that changed).
  function replayRows(engine) {
    let rows = new Map();
    return engine.steps.map((step) => {
      rows = new Map(rows);
      for (const ch of step.pages || []) {
        const uid = ch[0];
        if (ch[1] === null) { rows.delete(uid); continue; }
        const [table, shared, start, spans, total] = ch.slice(1, 6);
        const prev = rows.get(uid);
        const old = prev && prev.table === table ? prev.pages : [];
        rows.set(uid, { table, shared, pages: old.slice(0, start).concat(expand(spans)).slice(0, total) });
      }
      return rows;
    });
  }
  // The radix tree at each step: {nodes, pages: id -> page ids, lru: id -> last access} (stored as changes).
  function replayTrees(engine) {
    let nodes = [], pages = new Map(), lru = new Map();
    return engine.steps.map((step) => {
      if (step.tree) nodes = step.tree;
      if (step.tree_pages) {
        pages = new Map(pages);
        for (const [id, spans] of Object.entries(step.tree_pages)) pages.set(Number(id), expand(spans));
      }
      if (step.lru) {
        lru = new Map(lru);
        for (const [id, at] of Object.entries(step.lru)) lru.set(Number(id), at);
      }
      return { nodes, pages, lru };
    });
  }

  // What tools/trace_diff.py compares: decisions, never timings or page ids.
  function treeShape(nodes) {
    const kids = new Map();
    for (const n of nodes) { if (!kids.has(n[1])) kids.set(n[1], []); kids.get(n[1]).push(n); }
    const shape = (id) => "[" + (kids.get(id) || []).map((n) => `(${n[2]},${n[3]},${n[4].join(" ")},${shape(n[0])})`).sort().join("") + "]";
    return shape(0);
  }
  function eventSummary(events) {
    const out = [];
    for (const ev of events) {
      const k = ev.e;
      if (k === "admit" || k === "resume") out.push(`${k} ${ev.uid} [${ev.start}:${ev.end}] hit ${ev.hit}`);
      else if (["wait", "retract", "finish", "leave"].includes(k)) out.push(`${k} ${ev.uid}`);
      else if (k === "evict") out.push(`evict ${ev.pages.reduce((s, p) => s + p[1], 0)} pages`);
      else if (k === "accept") out.push(`accept ${ev.uid} kept ${ev.kept}`);
      else if (k === "insert") out.push(`insert ${ev.len} had ${ev.had}`);
      else if (k === "match") out.push(`match ${ev.len} hit ${ev.hit}`);
    }
    return out;
  }
  const FIELDS = ["phase", "batch", "tokens", "waiting", "running", "pages", "free", "tree", "events"];
  function signature(step, rows, tree) {
    const tokens = Object.keys(step.tokens || {}).map(Number).sort((a, b) => a - b).map((u) => [u, step.tokens[u]]);
    const pages = [...rows.keys()].sort((a, b) => a - b).map((u) => [u, rows.get(u).pages.length]);
    return {
      phase: step.phase,
      batch: step.rows.map((r) => `${r.uid}[${r.from}:${r.to}] ${r.kind}` + (r.drafts && r.drafts.length ? ` +${r.drafts.length} drafts` : "")),
      tokens, waiting: (step.waiting || []).map(([u, d, n]) => `${u} ${d}/${n}`), running: step.running || [],
      pages, free: step.free, tree: treeShape(tree.nodes),
      events: eventSummary((step.before || []).concat(step.after || [])),
    };
  }
  function signatures(engine) {
    const rows = replayRows(engine), trees = replayTrees(engine);
    return engine.steps.map((s, i) => signature(s, rows[i], trees[i]));
  }
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  // {engine, step, fields: [names]} of the first difference, or null; and every differing step of each engine.
  function compare(a, b) {
    let first = null;
    const differing = [];
    const n = Math.max(a.engines.length, b.engines.length);
    for (let e = 0; e < n; e++) {
      const set = new Set();
      differing.push(set);
      if (!a.engines[e] || !b.engines[e]) { first = first || { engine: e, step: 0, fields: ["engine"] }; continue; }
      const sa = signatures(a.engines[e]), sb = signatures(b.engines[e]);
      for (let i = 0; i < Math.max(sa.length, sb.length); i++) {
        const fields = !sa[i] || !sb[i] ? ["step"] : FIELDS.filter((f) => !same(sa[i][f], sb[i][f]));
        if (fields.length) {
          set.add(i);
          if (!first) first = { engine: e, step: i, fields };
        }
      }
    }
    return { first, differing };
  }

  // Page states of a step: free / cached / locked / held by a request (its uid) / conflict (claimed twice).
  function poolState(engine, rows, tree) {
    const ps = engine.config.page_size;
    const state = new Map();
    for (const n of tree.nodes) {
      for (const p of tree.pages.get(n[0]) || []) state.set(p, state.has(p) ? "conflict" : n[3] > 0 ? "locked" : "cached");
    }
    for (const [uid, row] of rows) {
      const own = row.pages.slice(Math.ceil(row.shared / ps));
      for (const p of own) state.set(p, state.has(p) ? "conflict" : uid);
    }
    return state;
  }

  // ------------------------------------------------------------------ the player
  class Player {
    constructor(root) {
      this.root = root;
      this.a = null; // the trace played
      this.b = null; // the trace compared with
      this.engine = 0;
      this.step = 0;
      this.timer = null;
      this.speed = 4;
      this.treePos = new Map(); // node id -> [x, y] drawn last
      this.build();
      // The player page takes ?trace=ch10&engine=1&step=5; an embedded player only its data attributes.
      const params = new URLSearchParams(root.dataset.open !== undefined ? location.search : "");
      const name = params.get("trace") || root.dataset.trace;
      if (name) {
        const engine = Number(params.get("engine") || root.dataset.engine || 0);
        const step = Number(params.get("step") || root.dataset.step || 0);
        this.loadExample(name, engine, step);
      }
    }

    build() {
      const r = this.root;
      r.textContent = "";
      r.classList.add("tp");
      r.tabIndex = 0;
      if (r.dataset.open !== undefined) {
        const bar = el("div", "tp-open");
        bar.append(this.fileInput("a", t("Open a trace")), this.fileInput("b", t("Compare with")));
        bar.append(el("span", "tp-hint", t("or drop a trace file here")));
        const examples = (r.dataset.examples || "").split(/\s+/).filter(Boolean);
        if (examples.length) {
          const ex = el("div", "tp-examples");
          ex.append(el("span", "tp-label", t("Reference traces") + ":"));
          for (const name of examples) {
            const b = el("button", "md-button tp-example", name);
            b.type = "button";
            b.dataset.example = name;
            b.onclick = () => this.loadExample(name, 0, 0);
            ex.append(b);
          }
          bar.append(ex);
        }
        r.append(bar);
        r.addEventListener("dragover", (e) => { e.preventDefault(); r.classList.add("tp-drop"); });
        r.addEventListener("dragleave", () => r.classList.remove("tp-drop"));
        r.addEventListener("drop", (e) => {
          e.preventDefault();
          r.classList.remove("tp-drop");
          const files = [...e.dataTransfer.files];
          if (files[0]) this.loadFile(files[0], this.a && files.length === 1 && e.target.closest(".tp-file-b") ? "b" : "a");
          if (files[1]) this.loadFile(files[1], "b");
        });
      }
      this.message = el("p", "tp-message");
      this.title = el("p", "tp-title");
      r.append(this.message, this.title);

      const controls = el("div", "tp-controls");
      this.engineSelect = el("select", "tp-engine");
      this.engineSelect.setAttribute("aria-label", t("engine"));
      this.engineSelect.onchange = () => this.show(Number(this.engineSelect.value), 0);
      const button = (cls, label, icon, fn) => {
        const b = el("button", `tp-btn ${cls}`);
        b.append(iconSvg(icon));
        b.type = "button";
        b.title = label;
        b.setAttribute("aria-label", label);
        b.onclick = fn;
        controls.append(b);
        return b;
      };
      controls.append(this.engineSelect);
      button("tp-first", t("First step"), "first", () => this.go(0));
      button("tp-prev", t("Previous step"), "prev", () => this.go(this.step - 1));
      this.playButton = button("tp-play", t("Play"), "play", () => this.toggle());
      button("tp-next", t("Next step"), "next", () => this.go(this.step + 1));
      button("tp-last", t("Last step"), "last", () => this.go(this.steps().length - 1));
      this.slider = el("input", "tp-slider");
      this.slider.type = "range";
      this.slider.min = 0;
      this.slider.setAttribute("aria-label", t("step"));
      this.slider.oninput = () => this.go(Number(this.slider.value));
      this.speedSelect = el("select", "tp-speed");
      this.speedSelect.setAttribute("aria-label", t("steps/s"));
      for (const s of [1, 2, 4, 8, 16]) {
        const o = el("option", "", `${s} ${t("steps/s")}`);
        o.value = s;
        o.selected = s === this.speed;
        this.speedSelect.append(o);
      }
      this.speedSelect.onchange = () => { this.speed = Number(this.speedSelect.value); if (this.timer) { this.stop(); this.toggle(); } };
      this.counter = el("span", "tp-counter");
      controls.append(this.slider, this.counter, this.speedSelect);
      r.addEventListener("keydown", (e) => {
        if (e.target.matches("input[type=file], select")) return;
        if (e.key === "ArrowRight") { this.go(this.step + 1); e.preventDefault(); }
        if (e.key === "ArrowLeft") { this.go(this.step - 1); e.preventDefault(); }
      });
      this.timeline = svg("svg", { class: "tp-timeline", preserveAspectRatio: "none", role: "img" });
      this.timeline.addEventListener("click", (e) => {
        const box = this.timeline.getBoundingClientRect();
        const n = this.steps().length;
        if (n) this.go(Math.min(n - 1, Math.floor(((e.clientX - box.left) / box.width) * n)));
      });
      this.diffBox = el("div", "tp-diff");
      this.body = el("div", "tp-body");
      r.append(controls, this.timeline, this.diffBox, this.body);
      this.panels = {};
      for (const [key, title] of [["batch", "Batch"], ["queues", "Queues"], ["events", "What happened"],
                                  ["pool", "KV pool"], ["table", "Page table"], ["tree", "Radix tree"]]) {
        const p = el("section", `tp-panel tp-${key}`);
        p.append(el("h4", "", t(title)));
        const content = el("div", "tp-content");
        p.append(content);
        this.panels[key] = content;
        this.body.append(p);
      }
      this.root.hidden = false;
      this.setEnabled(false);
    }

    fileInput(which, label) {
      const wrap = el("label", `tp-file tp-file-${which}`);
      wrap.append(el("span", "tp-label", label));
      const input = el("input");
      input.type = "file";
      input.accept = ".json,application/json";
      input.onchange = () => input.files[0] && this.loadFile(input.files[0], which);
      wrap.append(input);
      return wrap;
    }

    setEnabled(on) {
      for (const e of this.root.querySelectorAll(".tp-controls button, .tp-controls input, .tp-controls select")) e.disabled = !on;
    }

    error(text) {
      this.message.textContent = text;
      this.message.classList.add("tp-error");
    }

    async loadExample(name, engine, step) {
      const url = new URL(`assets/traces/${name}.json`, ROOT);
      try {
        const res = await fetch(url);
        if (!res.ok) throw new Error(`HTTP ${res.status}`);
        this.setTrace("a", await res.json(), `${name}.json`, engine, step);
      } catch (e) {
        this.error(t("cannot load {f}: {m}", { f: `${name}.json`, m: e.message }));
      }
    }

    loadFile(file, which) {
      const reader = new FileReader();
      reader.onload = () => {
        try {
          this.setTrace(which, JSON.parse(reader.result), file.name, this.engine, which === "b" ? this.step : 0);
        } catch (e) {
          this.error(t("cannot load {f}: {m}", { f: file.name, m: e.message }));
        }
      };
      reader.readAsText(file);
    }

    setTrace(which, doc, name, engine, step) {
      try {
        check(doc);
      } catch (e) {
        this.error(t("cannot load {f}: {m}", { f: name, m: e.message }));
        return;
      }
      this.message.textContent = "";
      this.message.classList.remove("tp-error");
      if (which === "b" && !this.a) which = "a";
      this[which] = doc;
      doc.fileName = name;
      for (const eng of doc.engines) { eng.rows = replayRows(eng); eng.trees = replayTrees(eng); }
      this.comparison = this.a && this.b ? compare(this.a, this.b) : null;
      this.engineSelect.textContent = "";
      this.a.engines.forEach((e, i) => {
        const o = el("option", "", `${t("engine")} ${i}: ${engineLabel(e)}`);
        o.value = i;
        this.engineSelect.append(o);
      });
      this.setEnabled(this.a.engines.length > 0);
      this.treePos = new Map(); // a new map: a running animation still reads the old one
      this.show(Math.min(engine, Math.max(this.a.engines.length - 1, 0)), step);
      this.root.dataset.loaded = this.b ? "2" : "1";
    }

    steps() {
      return this.a && this.a.engines[this.engine] ? this.a.engines[this.engine].steps : [];
    }

    show(engine, step) {
      this.engine = engine;
      this.engineSelect.value = engine;
      this.treePos = new Map(); // a new map: a running animation still reads the old one
      const a = this.a;
      const stopped = a.exit && a.exit.error ? " · " + t("the example stopped: {e}", { e: a.exit.error }) : "";
      this.title.textContent = `${a.fileName} · ${t("chapter {c}, {tree} tree", { c: a.chapter, tree: t(treeName(a.tree)) })}` +
        (this.b ? ` ↔ ${this.b.fileName}` : "") + stopped;
      this.slider.max = Math.max(this.steps().length - 1, 0);
      this.drawTimeline();
      this.drawDiff();
      this.go(step);
    }

    go(step) {
      const n = this.steps().length;
      if (!n) return;
      this.step = Math.max(0, Math.min(n - 1, step));
      this.slider.value = this.step;
      const s = this.steps()[this.step];
      this.counter.textContent = `${t("step")} ${this.step} / ${n - 1} · ${t("run")} ${s.run}`;
      this.root.dataset.step = this.step;
      this.render();
    }

    toggle() {
      if (this.timer) { this.stop(); return; }
      if (this.step >= this.steps().length - 1) this.go(0);
      this.playButton.replaceChildren(iconSvg("pause"));
      this.playButton.title = t("Pause");
      this.playButton.setAttribute("aria-label", t("Pause"));
      this.root.dataset.playing = "1";
      this.timer = setInterval(() => {
        if (this.step >= this.steps().length - 1) { this.stop(); return; }
        this.go(this.step + 1);
      }, 1000 / this.speed);
    }

    stop() {
      clearInterval(this.timer);
      this.timer = null;
      this.playButton.replaceChildren(iconSvg("play"));
      this.playButton.title = t("Play");
      this.playButton.setAttribute("aria-label", t("Play"));
      delete this.root.dataset.playing;
    }

    // ---------------------------------------------------------------- drawing
    drawTimeline() {
      const tl = this.timeline;
      tl.textContent = "";
      const steps = this.steps();
      const n = Math.max(steps.length, 1);
      tl.setAttribute("viewBox", `0 0 ${n} 40`);
      const work = steps.map((s) => s.rows.reduce((sum, r) => sum + (r.to - r.from), 0));
      const most = Math.max(1, ...work);
      const differing = this.comparison ? this.comparison.differing[this.engine] || new Set() : new Set();
      steps.forEach((s, i) => {
        const h = s.phase === "idle" ? 4 : 6 + 26 * Math.sqrt(work[i] / most);
        tl.append(svg("rect", { x: i + 0.08, y: 34 - h, width: 0.84, height: h, class: `tp-bar tp-${s.phase}` }));
        const events = (s.before || []).concat(s.after || []);
        if (events.some((e) => e.e === "retract")) tl.append(svg("rect", { x: i, y: 0, width: 1, height: 3, class: "tp-mark-retract" }));
        if (events.some((e) => e.e === "evict")) tl.append(svg("rect", { x: i, y: 3, width: 1, height: 3, class: "tp-mark-evict" }));
        if (differing.has(i)) tl.append(svg("rect", { x: i, y: 36, width: 1, height: 4, class: "tp-mark-diff" }));
      });
      this.cursor = svg("rect", { y: 0, width: 1, height: 40, class: "tp-cursor" });
      tl.append(this.cursor);
    }

    drawDiff() {
      const box = this.diffBox;
      box.textContent = "";
      if (!this.a) return;
      if (!this.b) {
        if (this.root.dataset.open !== undefined) box.append(el("p", "tp-hint", t("drop a second trace on 'Compare with' to see where they differ")));
        return;
      }
      const first = this.comparison.first;
      const line = el("p", first ? "tp-diff-first" : "tp-diff-none");
      if (!first) {
        line.textContent = t("Every step agrees.");
      } else {
        line.textContent = t("First difference: engine {e}, step {s} ({f}).", { e: first.engine, s: first.step, f: first.fields.map((f) => t(f)).join(", ") }) + " ";
        const jump = el("button", "md-button tp-jump", t("Jump to it"));
        jump.type = "button";
        jump.onclick = () => this.show(first.engine, first.step);
        line.append(jump);
      }
      box.append(line);
      this.diffTable = el("div", "tp-diff-table");
      box.append(this.diffTable);
    }

    render() {
      const eng = this.a.engines[this.engine];
      const s = eng.steps[this.step];
      const rows = eng.rows[this.step], tree = eng.trees[this.step];
      this.cursor.setAttribute("x", this.step);
      this.renderBatch(eng, s);
      this.renderQueues(s);
      this.renderEvents(s);
      this.renderPool(eng, s, rows, tree);
      this.renderTable(eng, rows);
      this.renderTree(eng, s, tree);
      this.renderDiffTable(eng);
    }

    vocab(doc, id) {
      const text = doc.vocab && doc.vocab[id];
      return text === undefined ? `#${id}` : JSON.stringify(text);
    }

    renderBatch(eng, s) {
      const p = this.panels.batch;
      p.textContent = "";
      if (s.phase === "idle") {
        p.append(el("p", "tp-hint", t("the state after the run ended")));
        if (s.error) p.append(el("p", "tp-error", t("the run stopped: {e}", { e: s.error })));
        return;
      }
      const head = el("p", `tp-phase tp-${s.phase}`, s.phase);
      if (s.ms !== undefined) head.append(el("span", "tp-time", " · " + t("forward pass {ms} ms, at {t} s", { ms: s.ms.toFixed(1), t: (s.t / 1000).toFixed(2) })));
      p.append(head);
      const most = Math.max(...s.rows.map((r) => r.to), 1);
      const table = el("table", "tp-rows");
      const hr = el("tr");
      for (const h of ["request", "kind", "positions", "tokens"]) hr.append(el("th", "", t(h)));
      table.append(hr);
      for (const r of s.rows) {
        const tr = el("tr");
        tr.dataset.uid = r.uid;
        const chip = el("td", "tp-uid", `${r.uid}`);
        chip.style.setProperty("--tp-uid", uidColor(r.uid));
        const bar = el("div", "tp-range");
        const cached = el("span", "tp-range-cached");
        cached.style.width = `${(100 * r.from) / most}%`;
        const fresh = el("span", "tp-range-new");
        fresh.style.width = `${(100 * (r.to - r.from - (r.drafts ? r.drafts.length : 0))) / most}%`;
        fresh.style.background = uidColor(r.uid);
        bar.append(cached, fresh);
        if (r.drafts && r.drafts.length) {
          const d = el("span", "tp-range-draft");
          d.style.width = `${(100 * r.drafts.length) / most}%`;
          bar.append(d);
        }
        const range = el("td", "tp-range-cell");
        range.append(bar, el("span", "tp-range-text", `[${r.from}:${r.to}]`));
        const out = (s.tokens || {})[r.uid] || [];
        let text = out.map((id) => this.vocab(this.a, id)).join(" ");
        if (r.drafts && r.drafts.length) text += (text ? " · " : "") + t("drafts {d}", { d: r.drafts.map((id) => this.vocab(this.a, id)).join(" ") });
        if ((s.dropped || []).includes(r.uid)) text += " ✗";
        tr.append(chip, el("td", "", r.kind), range, el("td", "tp-out", text));
        table.append(tr);
      }
      p.append(table);
    }

    renderQueues(s) {
      const p = this.panels.queues;
      p.textContent = "";
      const line = (label, items) => {
        const d = el("div", "tp-queue");
        d.append(el("span", "tp-label", label + ":"));
        if (!items.length) d.append(el("span", "tp-hint", t("(empty)")));
        for (const [uid, text] of items) {
          const c = el("span", "tp-chip", text);
          c.style.setProperty("--tp-uid", uidColor(uid));
          d.append(c);
        }
        p.append(d);
      };
      line(t("waiting"), (s.waiting || []).map(([u, done, n]) => [u, done ? `${u} · ${done}/${n}` : `${u} · ${n}`]));
      line(t("running"), (s.running || []).map((u) => [u, `${u}`]));
      if (s.ratio !== undefined) p.append(el("p", "tp-hint", t("new-token ratio {r}: running requests reserve this share of what they may still write", { r: s.ratio })));
    }

    renderEvents(s) {
      const p = this.panels.events;
      p.textContent = "";
      const list = (label, events) => {
        p.append(el("p", "tp-label", label));
        const ul = el("ul", "tp-events");
        const lines = events.map(describe).filter(Boolean);
        if (!lines.length) ul.append(el("li", "tp-hint", t("nothing")));
        for (const [kind, text] of lines) {
          const li = el("li", `tp-ev-${kind}`, text);
          ul.append(li);
        }
        p.append(ul);
      };
      list(t("Scheduled:"), s.before || []);
      const after = (s.after || []).slice();
      for (const u of s.dropped || []) after.push({ e: "dropped", uid: u });
      list(t("Ran and processed:"), after);
    }

    renderPool(eng, s, rows, tree) {
      const p = this.panels.pool;
      p.textContent = "";
      const state = poolState(eng, rows, tree);
      if (eng.maxPage === undefined) {
        let most = 0;
        eng.rows.forEach((r) => r.forEach((row) => row.pages.forEach((x) => (most = Math.max(most, x)))));
        eng.trees.forEach((tr) => tr.pages.forEach((pages) => pages.forEach((x) => (most = Math.max(most, x)))));
        eng.maxPage = most;
      }
      const total = eng.config.num_pages;
      const cols = 32;
      const shown = Math.min(total, Math.ceil((eng.maxPage + 1) / cols) * cols || cols);
      const g = svg("svg", { class: "tp-grid", viewBox: `0 0 ${cols * 10} ${Math.ceil(shown / cols) * 10}`, role: "img" });
      let free = 0;
      for (let i = 0; i < shown; i++) {
        const st = state.get(i);
        if (st === undefined) free++;
        const cell = svg("rect", { x: (i % cols) * 10 + 0.5, y: Math.floor(i / cols) * 10 + 0.5, width: 9, height: 9,
          class: `tp-page tp-page-${typeof st === "number" ? "held" : st || "free"}` });
        if (typeof st === "number") cell.style.fill = uidColor(st);
        const title = svg("title");
        title.textContent = `page ${i}: ` + (typeof st === "number" ? t("held by request {u}", { u: st }) : t(st === "locked" ? "cached, locked" : st || "free"));
        cell.append(title);
        cell.dataset.page = i;
        g.append(cell);
      }
      p.append(g);
      const legend = el("p", "tp-legend");
      for (const [cls, label] of [["free", "free"], ["cached", "cached"], ["locked", "cached, locked"]]) {
        legend.append(el("span", `tp-key tp-page-${cls}`), el("span", "", t(label) + " "));
      }
      p.append(legend);
      const note = [t("{n} pages, page size {s}", { n: total, s: eng.config.page_size })];
      if (shown < total) note.push(t("pages {a}..{b} (never used) are free", { a: shown, b: total - 1 }));
      p.append(el("p", "tp-hint", note.join(" · ")));
      const unclaimed = total - state.size;
      if (s.free !== undefined && s.free !== unclaimed) {
        p.append(el("p", "tp-error tp-leak", t("The cache manager counts {a} free pages; the rows and the tree leave {b} unclaimed.", { a: s.free, b: unclaimed })));
      }
      this.root.dataset.freePages = unclaimed;
    }

    renderTable(eng, rows) {
      const p = this.panels.table;
      p.textContent = "";
      if (!rows.size) { p.append(el("p", "tp-hint", t("no live request holds a row"))); return; }
      const ps = eng.config.page_size;
      for (const uid of [...rows.keys()].sort((x, y) => rows.get(x).table - rows.get(y).table)) {
        const row = rows.get(uid);
        const d = el("div", "tp-pt-row");
        const label = el("span", "tp-pt-label", t("row {r} · request {u}", { r: row.table, u: uid }));
        label.style.setProperty("--tp-uid", uidColor(uid));
        d.append(label);
        const strip = el("span", "tp-pt-strip");
        const shared = Math.ceil(row.shared / ps);
        row.pages.forEach((pg, i) => {
          const c = el("span", i < shared ? "tp-pt-cell tp-pt-shared" : "tp-pt-cell");
          if (i >= shared) c.style.background = uidColor(uid);
          c.title = `position ${i * ps}: page ${pg}`;
          strip.append(c);
        });
        d.append(strip, el("span", "tp-hint", ` ${row.pages.length}` + (shared ? ` · ${t("{n} prefix pages shared with the tree", { n: shared })}` : "")));
        p.append(d);
      }
    }

    renderTree(eng, s, tree) {
      const p = this.panels.tree;
      if (!(eng.features || []).includes("radix")) {
        p.textContent = "";
        p.append(el("p", "tp-hint", t("no radix tree in this engine (chapter 9 adds it; cache_type=naive shares nothing)")));
        return;
      }
      // Layout: leaves side by side in creation order, a parent above the middle of its children.
      const nodes = tree.nodes;
      const kids = new Map([[0, []]]);
      for (const n of nodes) {
        if (!kids.has(n[1])) kids.set(n[1], []);
        kids.get(n[1]).push(n);
      }
      const parentOf = new Map(nodes.map((n) => [n[0], n[1]]));
      const pos = new Map();
      let leaves = 0, depth = 0;
      const place = (id, d) => {
        depth = Math.max(depth, d);
        const children = (kids.get(id) || []).slice().sort((x, y) => x[0] - y[0]);
        if (!children.length) { pos.set(id, [leaves++ * 84 + 42, d * 62 + 22]); return; }
        children.forEach((c) => place(c[0], d + 1));
        const xs = children.map((c) => pos.get(c[0])[0]);
        pos.set(id, [(Math.min(...xs) + Math.max(...xs)) / 2, d * 62 + 22]);
      };
      place(0, 0);
      const width = Math.max(leaves, 1) * 84, height = depth * 62 + 48;
      let g = p.querySelector("svg.tp-tree");
      if (!g) {
        p.textContent = "";
        g = svg("svg", { class: "tp-tree", role: "img" });
        p.append(g, el("p", "tp-hint tp-tree-note"));
      }
      g.setAttribute("viewBox", `0 0 ${width} ${height}`);
      g.style.width = `${width}px`;
      const hit = new Set(), made = new Set();
      for (const ev of (s.before || []).concat(s.after || [])) {
        if (ev.e === "match" && ev.hit) hit.add(ev.node);
        if (ev.e === "insert") made.add(ev.node);
      }
      g.textContent = "";
      const edges = nodes.map((n) => {
        const line = svg("line", { class: "tp-edge" });
        g.append(line);
        return [line, n[1], n[0]];
      });
      const drawn = [];
      const rootG = svg("g", { class: "tp-node tp-root" });
      rootG.append(svg("circle", { r: 9 }));
      const rootLabel = svg("text", { y: 4, "text-anchor": "middle" });
      rootLabel.textContent = "root";
      rootG.append(rootLabel);
      g.append(rootG);
      drawn.push([rootG, 0]);
      for (const [id, , len, ref, head] of nodes) {
        const ng = svg("g", { class: `tp-node${ref ? " tp-locked" : ""}${hit.has(id) ? " tp-hit" : ""}${made.has(id) ? " tp-made" : ""}` });
        ng.dataset.node = id;
        ng.append(svg("rect", { x: -38, y: -17, width: 76, height: 34, rx: 6 }));
        const first = svg("text", { y: -3, "text-anchor": "middle", class: "tp-node-head" });
        first.textContent = head.map((x) => (this.a.vocab && this.a.vocab[x] !== undefined ? this.a.vocab[x] : `#${x}`)).join("").slice(0, 11);
        const second = svg("text", { y: 11, "text-anchor": "middle", class: "tp-node-len" });
        second.textContent = `${len}${ref ? " · ref " + ref : ""}`;
        const title = svg("title");
        title.textContent = `node ${id}: ${len} tokens, ref ${ref}, pages ${spanText(runsOf(tree.pages.get(id) || []))}, ` +
          `last access ${tree.lru.get(id)}`;
        ng.append(first, second, title);
        g.append(ng);
        drawn.push([ng, id]);
      }
      // Every node moves from where it was drawn last to where it is now; a new node grows out of its parent.
      const from = this.treePos;
      const start = new Map(drawn.map(([, id]) => {
        const parent = parentOf.get(id) || 0;
        return [id, from.get(id) || from.get(parent) || pos.get(parent) || pos.get(id)];
      }));
      const frames = this.timer ? 4 : 8;
      let k = 0;
      const frame = () => {
        k++;
        const f = Math.min(1, k / frames);
        const at = (id) => {
          const [x0, y0] = start.get(id), [x1, y1] = pos.get(id);
          return [x0 + (x1 - x0) * f, y0 + (y1 - y0) * f];
        };
        for (const [ng, id] of drawn) {
          const [x, y] = at(id);
          ng.setAttribute("transform", `translate(${x},${y})`);
        }
        for (const [line, parent, id] of edges) {
          const [x1, y1] = at(parent), [x2, y2] = at(id);
          line.setAttribute("x1", x1); line.setAttribute("y1", y1); line.setAttribute("x2", x2); line.setAttribute("y2", y2);
        }
        if (f < 1 && g.isConnected && this.tick === tick) requestAnimationFrame(frame);
      };
      const tick = (this.tick = (this.tick || 0) + 1);
      frame();
      this.treePos = pos;
      p.querySelector(".tp-tree-note").textContent = nodes.length ? "" : t("the tree is empty");
    }

    renderDiffTable(eng) {
      if (!this.b || !this.diffTable) return;
      const box = this.diffTable;
      box.textContent = "";
      const other = this.b.engines[this.engine];
      const sa = signature(eng.steps[this.step], eng.rows[this.step], eng.trees[this.step]);
      const sb = other && other.steps[this.step] ? signature(other.steps[this.step], other.rows[this.step], other.trees[this.step]) : null;
      const table = el("table", "tp-diff-rows");
      const hr = el("tr");
      for (const h of ["field", "yours", "reference"]) hr.append(el("th", "", t(h)));
      table.append(hr);
      for (const f of FIELDS) {
        const tr = el("tr");
        const va = show(sa[f]), vb = sb ? show(sb[f]) : t("missing");
        if (!sb || !same(sa[f], sb[f])) tr.className = "tp-differs";
        tr.dataset.field = f;
        tr.append(el("th", "", t(f)), el("td", "", va), el("td", "", vb));
        table.append(tr);
      }
      box.append(table);
    }
  }

  function show(v) {
    if (Array.isArray(v)) return v.map((x) => (Array.isArray(x) ? `${x[0]}: ${JSON.stringify(x[1])}` : String(x))).join(", ") || "–";
    if (v === null || v === undefined) return "–";
    return String(v);
  }

  function treeName(kind) {
    return { ref: "reference", learner: "learner", mine: "mine", test: "test" }[kind] || kind;
  }

  function engineLabel(e) {
    const c = e.config;
    const parts = [`page_size=${c.page_size}`, `cache_type=${c.cache_type}`];
    if (c.max_extend_tokens) parts.push(`max_extend_tokens=${c.max_extend_tokens}`);
    if (c.overlap) parts.push("overlap=on");
    if (c.mixed) parts.push("mixed=on");
    if (c.admission && c.admission !== "conservative") parts.push(`admission=${c.admission}`);
    if (c.speculative) parts.push(`speculative=${c.speculative}`);
    return parts.join(", ");
  }

  // One event as [kind, sentence] (null: not shown).
  function describe(ev) {
    const u = ev.uid;
    switch (ev.e) {
      case "admit":
        return ["admit", t("admitted request {u} into row {r}: {hit} tokens found in the radix tree, computes [{a}:{b}]{c}",
          { u, r: ev.row, hit: ev.hit, a: ev.start, b: ev.end, c: ev.chunk ? t(" (a chunk)") : "" })];
      case "resume":
        return ["admit", t("request {u} continues its prompt: [{a}:{b}]{c}", { u, a: ev.start, b: ev.end, c: ev.chunk ? t(" (a chunk)") : "" })];
      case "wait":
        if (ev.rows === 0) return ["wait", t("request {u} waits: no free row", { u })];
        if (ev.budget <= 0) return ["wait", t("request {u} waits: the token budget is spent", { u })];
        if (ev.kv < ev.reserved + ev.slots) return ["wait", t("request {u} waits: needs {n} KV slots, {kv} available, {res} reserved for running requests", { u, n: ev.slots, kv: ev.kv, res: ev.reserved })];
        return ["wait", t("request {u} waits: its prompt ({n} tokens) is over the budget left ({b})", { u, n: ev.tokens, b: ev.budget })];
      case "alloc":
        return ["alloc", ev.to.map(([uid, spans]) => t("request {u} gets pages {p}", { u: uid, p: spanText(spans) })).join("; ")];
      case "free":
        return ["free", t("pages {p} freed ({by})", { p: spanText(ev.pages), by: ev.by })];
      case "match":
        return ["match", t("radix match of {n} tokens: {hit} cached (node {node}){s}", { n: ev.len, hit: ev.hit, node: ev.node, s: ev.split ? t(", {k} node split", { k: ev.split }) : "" })];
      case "insert":
        return ["insert", t("radix insert of {n} tokens: {had} already there (node {node}){s}", { n: ev.len, had: ev.had, node: ev.node, s: ev.split ? t(", {k} node split", { k: ev.split }) : "" })];
      case "evict":
        return ["evict", t("evicted {n} pages ({p}): nodes {nodes}", { n: ev.pages.reduce((s, p) => s + p[1], 0), p: spanText(ev.pages), nodes: ev.nodes.join(", ") })];
      case "finish":
        return ["finish", t("request {u} finished: row {r} freed", { u, r: ev.row })];
      case "leave":
        return ["leave", t("request {u} left row {r}", { u, r: ev.row })];
      case "retract":
        return ["retract", t("request {u} retracted after {g} tokens: waits again with {k} tokens to prefill", { u, g: ev.generated, k: ev.known })];
      case "accept":
        return ["accept", t("request {u} kept {k} drafts", { u, k: ev.kept })];
      case "dropped":
        return ["dropped", t("result of request {u} thrown away (it had finished or was retracted)", { u })];
      default:
        return null;
    }
  }

  window.tracePlayer = { compare, signature, replayRows, replayTrees, check };
  function start() {
    for (const root of document.querySelectorAll(".trace-player")) {
      if (!root.tracePlayer) root.tracePlayer = new Player(root);
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
