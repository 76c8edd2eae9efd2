// @ts-check
// Flame graphs for the torchscope dashboard: an icicle chart on a canvas (root on top).
// Click a frame to zoom into it, the breadcrumb or "reset" to zoom out, type in the search box
// to highlight frames by name and see their share, hover for total/self time. Diff trees
// (with a `base` column: A's value per node) are coloured by change, red slower, blue faster.
// Every string from a trace is drawn on the canvas or set as textContent: never parsed as HTML.
// The page inlines this file before app.js; it defines one global, TorchscopeFlame.

/**
 * A flame tree as analysis/flame.py writes it: parallel columns, parents before children,
 * each level's nodes grouped by parent in drawing order.
 * @typedef {object} FlameData
 * @property {string} title
 * @property {string} unit
 * @property {number} events
 * @property {string[]} names   the name table
 * @property {number[]} name    per node: index into names
 * @property {number[]} parent  per node: parent node, -1 for the root (node 0)
 * @property {number[]} total   per node: time in it and under it
 * @property {number[]} self    per node: time in it alone
 * @property {number[]} [base]  diff trees: A's total at the same path
 */

/**
 * What a rendered graph offers its page and its tests.
 * @typedef {object} FlameController
 * @property {(node: number) => void} zoom       zoom into a node (0: the whole tree)
 * @property {() => number} zoomed                the node zoomed into
 * @property {(query: string) => {count: number, total: number}} search
 * @property {(node: number) => {x: number, y: number, w: number, h: number} | null} rectOf  in CSS px, relative to the canvas
 * @property {() => void} draw
 */

const TorchscopeFlame = (() => {
  const ROW = 18;
  const FONT = "11px sans-serif";
  const MATCH = "#c2255c";

  /** @param {number} ns @returns {string} */
  function fmtNs(ns) {
    const a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toFixed(3) + " s";
    if (a >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
    if (a >= 1e3) return (ns / 1e3).toFixed(1) + " µs";
    return Math.round(ns) + " ns";
  }

  /** @param {number} part @param {number} whole @returns {string} */
  const pct = (part, whole) => (whole > 0 ? ((100 * part) / whole).toFixed(1) : "0.0") + " %";

  /**
   * @template {keyof HTMLElementTagNameMap} K
   * @param {K} tag
   * @param {Record<string, string>} [attrs]
   * @param {string} [text]
   * @returns {HTMLElementTagNameMap[K]}
   */
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  /** A warm colour per name (stable across redraws), the usual flame-graph palette.
   * @param {string} name @returns {string} */
  function warm(name) {
    let h = 0;
    for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
    return `hsl(${10 + (h % 40)}, ${70 + ((h >> 8) % 20)}%, ${55 + ((h >> 16) % 12)}%)`;
  }

  /** Red where B grew, blue where it shrank, grey where it held; saturation by the change.
   * @param {number} b @param {number} a @returns {string} */
  function change(b, a) {
    if (a <= 0) return "hsl(0, 75%, 45%)";
    const r = Math.max(-1, Math.min(1, (b - a) / Math.max(a, b)));
    const sat = Math.round(10 + 70 * Math.abs(r));
    return r >= 0 ? `hsl(0, ${sat}%, ${78 - 25 * r}%)` : `hsl(215, ${sat}%, ${78 + 25 * r}%)`;
  }

  /** x (in value units) and depth of every node, from the level order.
   * @param {FlameData} d @returns {{x: Float64Array, depth: Int32Array, maxDepth: number}} */
  function layout(d) {
    const n = d.name.length;
    const x = new Float64Array(n), cursor = new Float64Array(n), depth = new Int32Array(n);
    let maxDepth = 0;
    for (let i = 1; i < n; i++) {
      const p = d.parent[i];
      x[i] = cursor[p] + x[p];
      cursor[p] += d.total[i];
      depth[i] = depth[p] + 1;
      if (depth[i] > maxDepth) maxDepth = depth[i];
    }
    return { x, depth, maxDepth };
  }

  /**
   * Draw `data` into `host` (replacing its content).
   * @param {HTMLElement} host
   * @param {FlameData} data
   * @returns {FlameController}
   */
  function render(host, data) {
    const n = data.name.length;
    const { x, depth, maxDepth } = layout(data);
    const rootTotal = data.total[0] || 1;
    const diff = Array.isArray(data.base);
    let zoomNode = 0;
    /** @type {Uint8Array} */
    let matched = new Uint8Array(n);
    let query = "";

    const crumbs = el("div", { class: "flame-crumbs", "data-testid": "flame-crumbs" });
    const reset = el("button", { "data-testid": "flame-reset" }, "reset zoom");
    const search = el("input", { type: "search", placeholder: "search frames…", "data-testid": "flame-search" });
    const found = el("span", { class: "muted", "data-testid": "flame-matches" });
    const tools = el("div", { class: "tl-tools" });
    tools.append(reset, search, found);
    const canvas = el("canvas", { "data-testid": "flame-canvas" });
    const wrap = el("div", { class: "flame-wrap" });
    wrap.style.overflowX = "hidden";
    wrap.append(canvas);
    const tip = el("div", { class: "tip", "data-testid": "flame-tip" });
    tip.hidden = true;
    tip.style.position = "fixed";
    tip.style.pointerEvents = "none";
    tip.style.whiteSpace = "pre";
    const legend = el("div", { class: "muted" }, diff
      ? "Widths are B's time; red: slower than A, blue: faster, grey: about the same. Click to zoom, hover for values."
      : "Width is time; each frame's children are below it. Click to zoom, hover for total/self time.");
    host.replaceChildren(legend, tools, crumbs, wrap, tip);

    /** @returns {number} */
    const width = () => Math.max(400, wrap.clientWidth || host.clientWidth || 1200);

    /** @param {number} i @returns {{x: number, y: number, w: number, h: number} | null} */
    function rectOf(i) {
      const x0 = x[zoomNode], span = data.total[zoomNode] || 1, W = width();
      const left = ((x[i] - x0) / span) * W, w = (data.total[i] / span) * W;
      if (i === zoomNode || isAncestor(i, zoomNode)) return { x: 0, y: depth[i] * ROW, w: W, h: ROW - 1 };
      if (left + w <= 0 || left >= W || w <= 0 || !isAncestor(zoomNode, i)) return null;
      return { x: Math.max(0, left), y: depth[i] * ROW, w: Math.min(W, left + w) - Math.max(0, left), h: ROW - 1 };
    }

    /** Whether `a` is a strict ancestor of `b`. @param {number} a @param {number} b */
    function isAncestor(a, b) {
      for (let p = data.parent[b]; p >= 0; p = data.parent[p]) if (p === a) return true;
      return false;
    }

    /** @param {number} i @returns {string} */
    function fill(i) {
      if (query) return matched[i] ? MATCH : "#dee2e6";
      if (diff && data.base) return change(data.total[i], data.base[i]);
      return warm(data.names[data.name[i]]);
    }

    function draw() {
      const W = width(), H = (maxDepth + 1) * ROW, dpr = window.devicePixelRatio || 1;
      canvas.width = Math.round(W * dpr);
      canvas.height = Math.round(H * dpr);
      canvas.style.width = W + "px";
      canvas.style.height = H + "px";
      const g = canvas.getContext("2d");
      if (!g) return;
      g.setTransform(dpr, 0, 0, dpr, 0, 0);
      g.clearRect(0, 0, W, H);
      g.font = FONT;
      g.textBaseline = "middle";
      for (let i = 0; i < n; i++) {
        const r = rectOf(i);
        if (!r || r.w < 0.5) continue;
        g.fillStyle = fill(i);
        g.fillRect(r.x, r.y, Math.max(0.5, r.w - (r.w > 2 ? 1 : 0)), r.h);
        if (r.w > 28) label(g, data.names[data.name[i]], r, query !== "" && matched[i] === 1);
      }
      crumbs.replaceChildren();
      /** @type {number[]} */
      const chain = [];
      for (let p = zoomNode; p >= 0; p = data.parent[p]) chain.unshift(p);
      chain.forEach((node, k) => {
        if (k) crumbs.append(el("span", { class: "muted" }, " › "));
        const full = data.names[data.name[node]];
        const b = el("button", { class: node === zoomNode ? "on" : "", "data-node": String(node), title: full }, shorten(full, 48));
        b.addEventListener("click", () => zoom(node));
        crumbs.append(b);
      });
      canvas.dataset.zoom = String(zoomNode);
    }

    /** Text fitted into a frame with an ellipsis.
     * @param {CanvasRenderingContext2D} g @param {string} text
     * @param {{x: number, y: number, w: number, h: number}} r @param {boolean} light */
    function label(g, text, r, light) {
      const room = r.w - 6;
      let t = text;
      if (g.measureText(t).width > room) {
        let lo = 0, hi = t.length;
        while (lo < hi) {
          const mid = (lo + hi + 1) >> 1;
          if (g.measureText(t.slice(0, mid) + "…").width <= room) lo = mid; else hi = mid - 1;
        }
        if (lo < 2) return;
        t = t.slice(0, lo) + "…";
      }
      g.fillStyle = light ? "#fff" : "#1d2330";
      g.fillText(t, r.x + 3, r.y + r.h / 2);
    }

    /** @param {string} s @param {number} k */
    const shorten = (s, k) => (s.length > k ? s.slice(0, k - 1) + "…" : s);

    /** @param {number} node */
    function zoom(node) {
      zoomNode = node >= 0 && node < n ? node : 0;
      draw();
    }

    /** Highlight frames whose name contains `q` (any case); their share counts a frame once
     * even when a matching frame is nested in another.
     * @param {string} q @returns {{count: number, total: number}} */
    function doSearch(q) {
      query = q.trim().toLowerCase();
      matched = new Uint8Array(n);
      const inMatch = new Uint8Array(n);
      let count = 0, total = 0;
      if (query) {
        const hit = data.names.map((s) => s.toLowerCase().includes(query));
        for (let i = 0; i < n; i++) {
          const p = data.parent[i];
          inMatch[i] = p >= 0 && (inMatch[p] || matched[p]) ? 1 : 0;
          if (hit[data.name[i]]) {
            matched[i] = 1;
            count++;
            if (!inMatch[i]) total += data.total[i];
          }
        }
        found.textContent = `${count} ${count === 1 ? "frame matches" : "frames match"} · ${fmtNs(total)} (${pct(total, rootTotal)} of all)`;
      } else {
        found.textContent = "";
      }
      found.dataset.count = String(count);
      draw();
      return { count, total };
    }

    /** @param {MouseEvent} e @returns {number} */
    function hit(e) {
      const box = canvas.getBoundingClientRect(), px = e.clientX - box.left, py = e.clientY - box.top;
      const row = Math.floor(py / ROW);
      for (let i = 0; i < n; i++) {
        if (depth[i] !== row) continue;
        const r = rectOf(i);
        if (r && px >= r.x && px < r.x + r.w) return i;
      }
      return -1;
    }

    /** @param {number} i @returns {string} */
    function describe(i) {
      const t = data.total[i], s = data.self[i];
      const lines = [data.names[data.name[i]],
        `total ${fmtNs(t)} (${pct(t, rootTotal)} of all${zoomNode ? `, ${pct(t, data.total[zoomNode])} of the zoomed frame` : ""})`,
        `self  ${fmtNs(s)} (${pct(s, rootTotal)} of all)`];
      if (diff && data.base) {
        const a = data.base[i], delta = t - a;
        lines.push(`A ${fmtNs(a)} → B ${fmtNs(t)}: ${delta >= 0 ? "+" : "−"}${fmtNs(Math.abs(delta))}` +
          (a > 0 ? ` (${delta >= 0 ? "+" : "−"}${pct(Math.abs(delta), a)})` : " (new in B)"));
      }
      return lines.join("\n");
    }

    canvas.addEventListener("mousemove", (e) => {
      const i = hit(e);
      if (i < 0) { tip.hidden = true; canvas.style.cursor = ""; return; }
      tip.textContent = describe(i);
      tip.dataset.node = String(i);
      tip.style.left = e.clientX + 14 + "px";
      tip.style.top = e.clientY + 14 + "px";
      tip.hidden = false;
      canvas.style.cursor = "pointer";
    });
    canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
    canvas.addEventListener("click", (e) => { const i = hit(e); if (i >= 0) zoom(i === zoomNode ? Math.max(0, data.parent[i]) : i); });
    reset.addEventListener("click", () => zoom(0));
    search.addEventListener("input", () => { doSearch(search.value); });
    const onResize = () => { if (canvas.isConnected) draw(); else window.removeEventListener("resize", onResize); };
    window.addEventListener("resize", onResize);
    setTimeout(draw, 0);
    draw();

    /** @type {FlameController} */
    const ctl = { zoom, zoomed: () => zoomNode, search: doSearch, rectOf, draw };
    controllers.set(canvas, ctl);
    return ctl;
  }

  /** @type {WeakMap<HTMLCanvasElement, FlameController>} */
  const controllers = new WeakMap();

  /**
   * The Flame tab: a picker over the trees this report has, and the chosen one drawn.
   * @param {Record<string, FlameData | null | undefined> | null | undefined} trees  one run's trees
   * @param {FlameData | null | undefined} [sampled]  torchscope run's sampled Python stacks
   * @param {Record<string, FlameData | null | undefined> | null | undefined} [diffs]  diff trees
   * @returns {HTMLElement[]}
   */
  function view(trees, sampled, diffs) {
    /** @type {[string, FlameData][]} */
    const choices = [];
    for (const [k, v] of Object.entries(trees || {})) if (v) choices.push([k, v]);
    if (sampled) choices.push(["sampled", sampled]);
    for (const [k, v] of Object.entries(diffs || {})) if (v) choices.push(["diff-" + k, v]);
    const heading = el("h2", {}, "Flame graph");
    if (!choices.length) {
      return [heading, el("div", { class: "empty" },
        "No flame graph for this trace: it has no host events with a duration. Profile with with_stack=True for Python call stacks.")];
    }
    const pick = el("select", { "data-testid": "flame-pick" });
    choices.forEach(([k, v], i) => {
      const o = el("option", { value: String(i) }, `${v.title} (${v.name.length} frames)`);
      o.dataset.key = k;
      pick.append(o);
    });
    const body = el("div", { "data-testid": "flame" });
    const show = () => { render(body, choices[Number(pick.value)][1]); };
    pick.addEventListener("change", show);
    setTimeout(show, 0);
    return [heading, pick, body];
  }

  return { render, view, layout, controllerOf: (/** @type {HTMLCanvasElement} */ c) => controllers.get(c), fmtNs };
})();
