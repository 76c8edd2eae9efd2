// @ts-check
// Modules: the nn.Module tree, and the ops a module calls itself.
// The page inlines this file before app.js; it defines one global, viewModules.

const viewModules = (() => {
  const { fmtCount, fmt } = TorchscopeFormat;
  const { h, empty } = TorchscopeDom;
  const { rep, UNITS, col, nameCol, drillRows } = TorchscopePage;
  function viewModules() {
    const rows = rep().modules || [];
    if (!rows.length) return [h("h2", {}, "Modules"), empty("No nn.Module scopes in this trace (record with with_stack=True or with_modules=True).")];
    // the report's rows are paths in tree order: nest them by path
    /** @type {{children: Obj[]}} */
    const root = { children: [] };
    /** @type {Record<string, Obj>} */
    const byPath = {};
    rows.forEach((/** @type {Obj} */ r) => {
      const node = { ...r, children: [] };
      byPath[r.path] = node;
      const up = r.path.includes("/") ? byPath[r.path.slice(0, r.path.lastIndexOf("/"))] : null;
      (up || root).children.push(node);
    });
    const total = Math.max(1e-9, ...root.children.map((c) => c.host_us));
    const device = rows.some((/** @type {Obj} */ r) => r.device_us > 0); // a column of zeros says nothing
    function node(/** @type {Obj} */ n, /** @type {number} */ depth) {
      const row = h("span", { class: "row" }, h("span", { class: "bar", style: `width:${Math.max(1, (160 * n.host_us) / total)}px` }),
        h("button", { class: "link", "data-path": n.path, onclick: (/** @type {Event} */ e) => { e.preventDefault(); openOps(n); } }, n.module), h("span", { class: "muted" }, `host ${fmt(n.host_us, UNITS().host_us)}` + (device ? ` · device ${fmt(n.device_us, UNITS().device_us)}` : "") +
          ` · ${fmtCount(n.calls)} call${n.calls === 1 ? "" : "s"}`));
      if (!n.children.length) return h("li", {}, row);
      return h("li", {}, h("details", depth < 2 ? { open: true } : {}, h("summary", {}, row), h("ul", {}, n.children.map((/** @type {Obj} */ c) => node(c, depth + 1)))));
    }
    const drill = h("div", { class: "drill", "data-testid": "module-drill" }, h("span", { class: "muted" }, "Click a module for the ops it calls itself."));
    function openOps(/** @type {Obj} */ n) {
      drill.replaceChildren(h("h3", {}, n.path), ...drillRows("Ops it calls itself (its submodules' are theirs)", "module_ops", "path", n.path,
        [nameCol("name", "op"), col("calls", "calls"), col("host_us", "host total"), ...(device ? [col("device_us", "device total")] : [])], "drill-module-ops"));
      drill.scrollIntoView({ block: "nearest" });
    }
    return [h("h2", {}, "Modules"), h("div", { class: "tree", "data-testid": "module-tree" }, h("ul", {}, root.children.map((c) => node(c, 0)))), drill];
  }

  return viewModules;
})();
