// @ts-check
// Chart helpers for the torchscope dashboard: round axis ticks (1, 2, 5 x 10^n; powers of 1024
// for bytes) and the diff's step-time waterfall. The page inlines this file before app.js; it
// defines one global, TorchscopeCharts. Every label is an SVG text node (textContent).

const TorchscopeCharts = (() => {
  const SVGNS = "http://www.w3.org/2000/svg";

  /** A round step (1, 2 or 5 x 10^n) that cuts span into about count parts.
   * @param {number} span @param {number} count @returns {number} */
  function niceStep(span, count) {
    if (!(span > 0)) return 1;
    const raw = span / Math.max(1, count), p = 10 ** Math.floor(Math.log10(raw)), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
  }

  /**
   * Round ticks from 0 to at least max; the last is the axis' top.
   * @param {number} max @param {number} count @param {boolean} [binary] bytes: round in KiB/MiB/GiB
   * @returns {number[]}
   */
  function ticks(max, count, binary) {
    if (!(max > 0)) return [0, 1];
    let unit = 1;
    if (binary) while (max / unit >= 1024) unit *= 1024;
    const step = niceStep(max / unit, count) * unit;
    /** @type {number[]} */
    const out = [];
    for (let i = 0; out.length < 50; i++) { out.push(i * step); if (i * step >= max * (1 - 1e-9)) break; }
    return out;
  }

  /** A formatted tick without trailing zeros: "50.000 ms" -> "50 ms". @param {string} text */
  const trim = (text) => text.replace(/(\.\d*?)0+(?=\s|$)/, "$1").replace(/\.(?=\s|$)/, "");

  /** @param {string} tag @param {Record<string, string | number>} [attrs] @param {string} [text] @returns {SVGElement} */
  function s(tag, attrs, text) {
    const e = /** @type {SVGElement} */ (document.createElementNS(SVGNS, tag));
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  /**
   * The step-time waterfall of a diff: A's step, each category's change floating from the
   * running total, then B's step. Red: slower, green: faster.
   * @param {{category: string, delta: number}[]} cats
   * @param {number} a  A's step time
   * @param {number} b  B's step time
   * @param {(v: number) => string} fmt
   * @param {string} labelA @param {string} labelB
   * @returns {SVGElement}
   */
  function waterfall(cats, a, b, fmt, labelA, labelB) {
    const rows = cats.filter((c) => c.delta);
    // the label column as wide as its longest label (about 7 px a character), up to 360 px:
    // at a fixed 190 px, "A: runA/traces/step_4.pt.trace.json" was drawn from 25 px left of
    // the chart, its "A:" cut off; longer ones keep their start and end, the whole in a tooltip
    const CH = 7, widest = Math.max(...[labelA, labelB, ...rows.map((c) => c.category)].map((t) => t.length));
    const W = 900, row = 22, L = Math.min(360, Math.max(190, widest * CH + 12)), R = 110, top = 22, H = top + (rows.length + 2) * row + 6;
    const room = Math.floor((L - 12) / CH);
    const fit = (/** @type {string} */ t) => (t.length <= room ? t : t.slice(0, Math.ceil(room / 2) - 1) + "…" + t.slice(t.length - Math.floor(room / 2)));
    /** @type {{label: string, from: number, to: number, color: string, text: string}[]} */
    const bars = [{ label: labelA, from: 0, to: a, color: "#868e96", text: fmt(a) }];
    let run = a;
    for (const c of rows) {
      bars.push({ label: c.category, from: run, to: run + c.delta, color: c.delta > 0 ? "#e03131" : "#2f9e44", text: (c.delta > 0 ? "+" : "") + fmt(c.delta) });
      run += c.delta;
    }
    bars.push({ label: labelB, from: 0, to: b, color: "#3b5bdb", text: fmt(b) });
    const max = Math.max(...bars.map((x) => Math.max(x.from, x.to)));
    const tk = ticks(max, 6), top1 = tk[tk.length - 1];
    const X = (/** @type {number} */ v) => L + (v / top1) * (W - L - R);
    const svg = s("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, "data-testid": "diff-waterfall" });
    for (const v of tk) {
      svg.append(s("line", { x1: X(v), x2: X(v), y1: top - 4, y2: H - 4, stroke: "#eee" }));
      svg.append(s("text", { x: X(v), y: 12, "text-anchor": "middle" }, trim(fmt(v))));
    }
    bars.forEach((x, i) => {
      const y = top + i * row, lo = Math.min(x.from, x.to), hi = Math.max(x.from, x.to);
      const label = s("text", { x: L - 6, y: y + 14, "text-anchor": "end" }, fit(x.label));
      label.append(s("title", {}, x.label));
      svg.append(label);
      const r = s("rect", { x: X(lo), y: y + 3, width: Math.max(1, X(hi) - X(lo)), height: row - 6, fill: x.color });
      r.append(s("title", {}, `${x.label}: ${x.text}`));
      svg.append(r);
      svg.append(s("text", { x: X(hi) + 6, y: y + 14 }, x.text));
      if (i > 0 && i < bars.length - 1) svg.append(s("line", { x1: X(x.from), x2: X(x.from), y1: y - row + 3, y2: y + 3, stroke: "#999", "stroke-dasharray": "2,2" }));
    });
    return svg;
  }

  return { niceStep, ticks, trim, waterfall };
})();
