// @ts-check
// Kernels: the table and the ops that launched a kernel (chain.js).
// The page inlines this file before app.js; it defines one global, viewKernels.

const viewKernels = (() => {
  const { fmtUs } = TorchscopeFormat;
  const { h, empty } = TorchscopeDom;
  const { table } = TorchscopeTable;
  const { rep, col, nameCol, reportPart, drillTable } = TorchscopePage;
  const { hbars } = TorchscopePlots;
  const C = TorchscopeChain;
  function viewKernels() {
    const ks = rep().kernels || [];
    if (!ks.length) return [h("h2", {}, "Kernels"), empty("No kernels in this trace (CPU-only run)."), ...reportPart("Time on the device", "temporal_breakdown")];
    const drill = h("div", { class: "drill", "data-testid": "kernel-drill" }, h("span", { class: "muted" }, "Click a kernel for the ops that launched it."));
    return [h("h2", {}, "Kernels"),
      hbars(ks.slice(0, 12).map((/** @type {Obj} */ k) => ({ k: k.name, v: k.total_us })), fmtUs, "kernels-chart"),
      table([nameCol("name", "name"), col("count", "calls"), col("total_us", "total"), col("share_pct", "share"), col("mean_us", "mean"),
        col("min_us", "min"), col("max_us", "max"), col("occupancy_pct", "est. occupancy"), col("blocks_per_sm", "blocks per SM"),
        { key: "tensor_core", label: "Tensor Cores", fmt: (v) => (v ? "yes" : "no") }], ks, { id: "kernels-table", onRow: (k) => drill.replaceChildren(h("h3", {}, k.name),
        ...drillTable("Launched by (the innermost op)", C.launchers(rep(), k.name), [nameCol("op_name", "launching op"), col("count", "calls"), col("total_us", "total"),
          col("shapes", "input shapes")], "drill-launchers", "none of the op rows the report keeps lists it among its top kernels")) }),
      drill,
      ...reportPart("Kernels by op and input shape (with the ops each calls)", "kernels_by_op"), ...reportPart("Kernel types", "kernel_types"),
      ...reportPart("Time on the device", "temporal_breakdown"), ...reportPart("Launches", "launch_stats"),
      ...reportPart("Idle time per stream", "idle_time"), ...reportPart("Queue length per stream", "queue_length")];
  }

  return viewKernels;
})();
