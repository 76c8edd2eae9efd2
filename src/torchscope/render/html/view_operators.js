// @ts-check
// Operators: the table and the drill-down chain (chain.js) op -> input shapes -> call stacks and kernels.
// The page inlines this file before app.js; it defines one global, viewOperators.

const viewOperators = (() => {
  const { fmtUs } = TorchscopeFormat;
  const { h, empty } = TorchscopeDom;
  const { table } = TorchscopeTable;
  const { rep, col, nameCol, drillTable, reportPart } = TorchscopePage;
  const { hbars } = TorchscopePlots;
  const OP_COLS = () => [nameCol("name", "name"), { key: "kind", label: "kind" }, col("calls", "calls"),
    col("host_self_us", "host self"), col("host_total_us", "host total"), col("host_avg_us", "host avg"), col("host_max_us", "host max"),
    col("device_self_us", "device self"), col("device_total_us", "device total")];
  const C = TorchscopeChain;
  /** A shape row's input shapes as the page shows them: the shapes, "(other shapes: N shapes)", or why there are none.
   * @param {Obj} o @returns {string} */
  const dimsText = (o) => o.input_dims === C.OTHER_SHAPES ? `${C.OTHER_SHAPES}: ${o.shapes} shapes` : o.input_dims ?? C.noShapes(rep().meta, o.kind);
  function viewOperators() {
    const ops = rep().operators || [];
    if (!ops.length) return [h("h2", {}, "Operators"), empty("No host operators in this trace.")];
    const device = ops.some((/** @type {Obj} */ o) => o.device_total_us);
    const by = device ? "device_total_us" : "host_total_us";
    const drill = h("div", { class: "drill", "data-testid": "op-drill" }, h("span", { class: "muted" }, "Click an operator for its input shapes, then a shape for its call stacks and the kernels it launched."));
    // op -> its input-shape rows -> (click one) its call stacks and the device work it launched
    const openShape = (/** @type {Obj} */ o, /** @type {HTMLElement} */ box) => {
      const ks = C.kernels(rep(), o.name, o.input_dims), sum = C.sumUs(ks, "total_us");
      box.replaceChildren(h("h4", {}, `${o.name} · input shapes ${dimsText(o)}`),
        ...drillTable("Python call stacks", C.stacks(rep(), o.name, o.input_dims), [nameCol("stack", "stack (innermost first)"), col("calls", "calls"),
          col("host_total_us", "host total"), col("host_self_us", "host self")], "drill-stacks", C.noStacks(rep().meta, o.kind)),
        ...drillTable("Kernels launched (by this op or the ops it calls)", ks, [nameCol("name", "kernel"), col("count", "calls"), col("total_us", "total"),
          col("op_share_pct", "share of the op"), col("self_total_us", "launched itself"), col("mean_us", "mean")], "drill-kernels",
          o.device_total_us ? null : "no device time"),
        ...(ks.length ? [h("div", { class: "muted", "data-testid": "drill-kernels-sum" }, `sum ${fmtUs(sum)} = the shape's device total ${fmtUs(o.device_total_us)}` +
          (ks.some((k) => k.name === C.OTHER) ? ` (the top kernels, then ${C.OTHER})` : ""))] : []));
    };
    const open = (/** @type {Obj} */ o) => {
      const rows = C.shapes(rep(), o.name), cover = C.shapeCoverage(rows, o);
      const box = h("div", { class: "drill", "data-testid": "shape-drill" }, h("span", { class: "muted" }, rows.length ? "Click an input shape for its call stacks and the kernels it launched." : ""));
      drill.replaceChildren(h("h3", {}, o.name),
        ...(cover ? [h("div", { class: "muted", "data-testid": "drill-shapes-cover" }, cover)] : []),
        ...drillTable("By input shape", rows.map((x) => ({ ...x, dims: dimsText(x) })), [nameCol("dims", "input shapes"), col("calls", "calls"),
          col("host_total_us", "host total"), col("host_avg_us", "host avg"), col("device_self_us", "device self"), col("device_total_us", "device total")],
          "drill-shapes", "none in the report", { onRow: (x) => openShape(x, box) }), box);
      if (C.opensAtOnce(rows, o)) openShape(rows[0], box);
      drill.scrollIntoView({ block: "nearest" });
    };
    return [h("h2", {}, "Operators"), h("div", { class: "muted" }, (device ? "By device time (with the ops they call), then host time." : "By host time.") + " Click a row to drill down."),
      hbars(ops.slice(0, 12).map((/** @type {Obj} */ o) => ({ k: o.name, v: o[by] })), fmtUs, "ops-chart"),
      table(OP_COLS(), ops, { id: "ops-table", onRow: open }), drill,
      ...reportPart("By input shape", "operators_by_shape"), ...reportPart("FLOPs", "flops"), ...reportPart("Python call stacks", "call_stacks")];
  }

  return viewOperators;
})();
