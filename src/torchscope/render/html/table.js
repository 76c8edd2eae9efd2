// @ts-check
// A sortable, filterable table, generic over its rows: `visible` is its data shaping (filter by
// the text columns, sort by one column), `table` draws it. The page inlines this file before
// app.js; it defines one global, TorchscopeTable.

/** @typedef {Record<string, any>} Row a table row (a report record) */
/** @typedef {{key: string, label: string, num?: boolean, cls?: string | null, fmt?: (v: any, row: Row) => any}} Col */
/** @typedef {{id?: string, sort?: string, asc?: boolean, limit?: number, onRow?: (row: Row) => void, rowClass?: (row: Row) => string | null}} TableOpts */

const TorchscopeTable = (() => {
  const { h } = TorchscopeDom;

  /** The rows a table shows: those whose text columns contain `filter` (lower case), sorted by
   * `sortKey` (numbers as numbers, missing ones last when descending; text by localeCompare).
   * @param {Row[]} rows @param {Col[]} cols @param {string} filter @param {string | null} sortKey @param {boolean} desc
   * @returns {Row[]} */
  function visible(rows, cols, filter, sortKey, desc) {
    let r = rows;
    if (filter) r = r.filter((x) => cols.some((c) => !c.num && String(x[c.key] ?? "").toLowerCase().includes(filter)));
    if (sortKey) {
      const key = sortKey, c = cols.find((c) => c.key === key);
      r = r.slice().sort((a, b) => {
        const va = a[key], vb = b[key];
        const d = c && c.num ? (Number(va ?? -Infinity) - Number(vb ?? -Infinity)) : String(va ?? "").localeCompare(String(vb ?? ""));
        return desc ? -d : d;
      });
    }
    return r;
  }

  /** A sortable (click a header), filterable table of at most opts.limit (1000) rows.
   * @param {Col[]} cols @param {Row[]} rows @param {TableOpts} [opts] @returns {HTMLElement} */
  function table(cols, rows, opts) {
    const o = opts || {};
    let sortKey = o.sort || null, desc = !o.asc, filter = "";
    /** @type {Row | null} */
    let picked = null;
    const box = h("div", { class: "tablebox" });
    const count = h("span", { class: "muted" });
    const input = h("input", { class: "filter", placeholder: "filter by name…", "data-testid": "filter",
      oninput: (/** @type {Event} */ e) => { filter = /** @type {HTMLInputElement} */ (e.target).value.toLowerCase(); draw(); } });
    function draw() {
      const r = visible(rows, cols, filter, sortKey, desc);
      const head = h("tr", {}, cols.map((c) => h("th", {
        class: [c.num ? "num" : "", c.key === sortKey ? (desc ? "sorted-desc" : "sorted-asc") : ""].join(" ").trim() || null,
        "data-key": c.key,
        onclick: () => { if (sortKey === c.key) desc = !desc; else { sortKey = c.key; desc = !!c.num; } draw(); },
      }, c.label)));
      const onRow = o.onRow;
      // a clicked row stays marked (the drill-down below it is that row's)
      const pick = (/** @type {Event} */ e, /** @type {Row} */ x) => {
        picked = x;
        box.querySelectorAll("tr.picked").forEach((tr) => tr.classList.remove("picked"));
        /** @type {HTMLElement} */ (e.currentTarget).classList.add("picked");
        if (onRow) onRow(x);
      };
      // a row's own class (the diff's noise rows: dimmed, as the terminal dims them)
      const own = (/** @type {Row} */ x) => (o.rowClass && o.rowClass(x)) || "";
      const body = r.slice(0, o.limit || 1000).map((x) => h("tr", onRow
        ? { class: [x === picked ? "clickable picked" : "clickable", own(x)].join(" ").trim(), onclick: (/** @type {Event} */ e) => pick(e, x) }
        : (own(x) ? { class: own(x) } : {}), cols.map((c) => {
        const v = x[c.key];
        return h("td", { class: c.num ? "num" : (c.cls || null) }, c.fmt ? c.fmt(v, x) : (v ?? "–"));
      })));
      box.replaceChildren(h("table", { class: "grid", "data-testid": o.id || "table" }, h("thead", {}, head), h("tbody", {}, body)));
      // the table draws at most `limit` rows: say so, not "2000 of 2000 rows" over 1,000 drawn
      const limit = o.limit || 1000;
      count.textContent = r.length <= limit ? ` ${r.length} of ${rows.length} rows`
        : ` the first ${limit} of ${r.length} ${r.length < rows.length ? `matching rows (of ${rows.length})` : "rows"}; filter or sort to see others`;
    }
    draw();
    return h("div", {}, input, count, box);
  }

  return { table, visible };
})();
