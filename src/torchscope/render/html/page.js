// @ts-check
// The page's state and what every view reads from it: the current run and its report, the
// report's units, columns formatted by them, any report section rendered generically, and the
// drill-down panels. The page inlines this file before the views; it defines one global,
// TorchscopePage.

/** @typedef {Record<string, any>} Obj a payload or report object (JSON) */

const TorchscopePage = (() => {
  const { DASH, fmt, pretty } = TorchscopeFormat;
  const { h } = TorchscopeDom;
  const { table } = TorchscopeTable;
  /** @typedef {{payload: Obj, run: number, view: string, runs: Obj[]}} State */
  /** @type {State} */
  const state = { payload: {}, run: 0, view: "overview", runs: [] };
  // Every number the views show is the report's (report --json), in its order, formatted by its unit.
  /** @returns {Obj} */
  const run = () => (state.payload.runs || [])[state.run] || {};
  /** @returns {Obj | null} */
  const report = () => state.payload.report || null;
  // the report of the current run: the trace's, or this rank's in a set
  /** @returns {Obj} */
  function rep() {
    const r = report();
    if (r && r.kind === "traceset") return (r.ranks || {})[run().name] || {};
    return r || {};
  }
  // the report's units and the current run's (a set's own report has only those of its own
  // views: a rank's findings' evidence showed bare)
  /** @type {{ of: unknown, units: Record<string, string> }} */
  const unitsMemo = { of: null, units: {} };  // each table cell asks: merged once per run
  /** @returns {Record<string, string>} */
  function UNITS() {
    const r = rep();
    if (unitsMemo.of !== r) unitsMemo.units = Object.assign({}, (report() || {}).units, r.units), unitsMemo.of = r;
    return unitsMemo.units;
  }
  /** @returns {number} */
  const START = () => (rep().meta || {}).start_us || 0;
  // a column of a report table: its label, and its unit from report.units
  /** @param {string} key @param {string} label @param {Partial<Col>} [extra] @returns {Col} */
  const col = (key, label, extra) => Object.assign({ key, label, num: true, fmt: (/** @type {unknown} */ v) => fmt(v, UNITS()[key], START()) }, extra || {});
  /** @param {string} key @param {string} label @returns {Col} */
  const nameCol = (key, label) => ({ key, label, cls: "name" });

  /** A finding: rule, message, fix, and its evidence folded; ``units`` for evidence that is
   * not the current report's (a job's findings carry their own).
   * @param {Obj} rec @param {Obj} [units] */
  function recCard(rec, units) {
    return h("div", { class: "rec", "data-testid": "recommendation" },
      h("div", { class: "t" }, rec.rule + (rec.rank !== undefined && rec.rank !== null ? ` (rank ${rec.rank})` : "")), h("div", {}, rec.message),
      rec.fix ? h("div", {}, h("b", {}, "Fix: "), String(rec.fix)) : null,
      Object.keys(rec.evidence || {}).length ? h("details", {}, h("summary", {}, "evidence"), generic(rec.evidence, "evidence", 1, units)) : null);
  }
  function warningsBox() {
    /** @type {string[]} */
    const input = (rep().meta || {}).warnings || [], other = /** @type {string[]} */ (state.payload.warnings || []);
    /** @type {string[]} */
    const notes = (rep().meta || {}).notes || [];
    const out = [];
    if (notes.length) out.push(h("div", { class: "rec", "data-testid": "report-notes" }, h("div", { class: "t" }, "Left out"), h("ul", {}, notes.map((/** @type {string} */ w) => h("li", {}, w)))));
    if (input.length) out.push(h("div", { class: "rec warnbox", "data-testid": "input-warnings" }, h("div", { class: "t" }, "The input needed repair"), h("ul", {}, input.map((/** @type {string} */ w) => h("li", {}, w)))));
    if (other.length) out.push(h("details", { "data-testid": "warnings" }, h("summary", { class: "warn" }, `${other.length} warning${other.length === 1 ? "" : "s"}`), h("ul", {}, other.map((w) => h("li", {}, w)))));
    return out;
  }
  /** Anything in the report: objects as key/value lists, lists of objects as tables, numbers in
   * the unit report.units names for their key (a nested map inherits its key's unit).
   * @param {any} v @param {string} key @param {number} [depth] @param {Obj} [unitsOf] @returns {Node} */
  function generic(v, key, depth, unitsOf) {
    depth = depth || 0;
    const units = unitsOf || UNITS(), start = START();
    if (v === null || v === undefined) return h("span", { class: "muted" }, DASH);
    if (Array.isArray(v)) {
      if (!v.length) return h("span", { class: "muted" }, "none");
      if (v.every((x) => x && typeof x === "object" && !Array.isArray(x))) {
        /** @type {string[]} */
        const keys = [...new Set(v.flatMap((x) => Object.keys(x)))];
        const simple = keys.filter((k) => v.every((x) => x[k] === null || x[k] === undefined || typeof x[k] !== "object"));
        const cols = simple.map((k) => ({ key: k, label: pretty(k), num: v.some((x) => typeof x[k] === "number"), fmt: (/** @type {unknown} */ x) => typeof x === "boolean" ? (x ? "yes" : "no") : fmt(x, units[k] || (k.endsWith("_ns") ? "ns" : undefined), start), cls: typeof v[0][k] === "string" ? "name" : null }));
        if (cols.length) return table(cols, v, { id: "generic-table" });
      }
      return h("div", {}, v.map((x) => h("div", {}, typeof x === "object" ? generic(x, key, depth + 1, unitsOf) : String(x))));
    }
    if (typeof v === "object") {
      return h("dl", { class: "kv" }, Object.entries(v).flatMap(([k, x]) => [h("dt", {}, pretty(k)),
        h("dd", {}, generic(x, units[k] ? k : key, depth + 1, unitsOf))]));
    }
    // a job's times are ns, named so (``median_breakdown_ns``): without a unit they read 97570000
    if (typeof v === "number") return document.createTextNode(fmt(v, units[key] || (key.endsWith("_ns") ? "ns" : undefined), start));
    if (typeof v === "boolean") return document.createTextNode(v ? "yes" : "no");
    return document.createTextNode(String(v));
  }

  // a section of the current run's report, rendered with its units, when it holds anything
  /** @param {string} title @param {...string} path @returns {Node[]} */
  function reportPart(title, ...path) {
    let r = rep();
    for (const k of path) r = r && typeof r === "object" ? r[k] : undefined;
    if (r === undefined || r === null || (Array.isArray(r) && !r.length)) return [];
    return [h("h3", {}, title), generic(r, path[path.length - 1])];
  }
  // a drill-down panel: the report's rows of `key` whose `field` is `value`, as a table
  /** @param {string} title @param {string} key @param {string} field @param {unknown} value @param {Col[]} cols @param {string} id @param {string | null} [nothing] */
  function drillRows(title, key, field, value, cols, id, nothing) {
    return drillTable(title, (rep()[key] || []).filter((/** @type {Obj} */ x) => x[field] === value), cols, id, nothing);
  }
  /** A heading and the rows as a table, or `nothing` (a sentence) when there are none.
   * @param {string} title @param {Obj[]} rows @param {Col[]} cols @param {string} id @param {string | null} [nothing] @param {TableOpts} [opts] */
  function drillTable(title, rows, cols, id, nothing, opts) {
    return [h("h4", {}, title), rows.length ? table(cols, rows, Object.assign({ id }, opts || {})) : h("div", { class: "muted", "data-testid": id }, nothing || "none in the report")];
  }
  /** @returns {Obj | null} */
  const accuracy = () => state.payload.accuracy || (report() || {}).accuracy || null;

  /** A report's step row by its number, or "first–last" for a row that stands for a run of
   * consecutive steps (above the report's MAX_STEP_ROWS). @param {Record<string, any>} x */
  const stepLabel = (x) => ((x.steps || 1) > 1 ? `${x.step}–${x.last_step}` : x.step);
  return { state, run, report, rep, UNITS, START, col, nameCol, generic, reportPart, recCard, warningsBox, drillRows, drillTable, accuracy, stepLabel };
})();
