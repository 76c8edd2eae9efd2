// @ts-check
// The operators drill-down as a chain, from the report's own rows: op -> its input-shape rows
// (operators_by_shape) -> a shape's call stacks (call_stacks) and the device work it launched
// (kernels_by_op, inclusive: its rows add up to the shape row's device total); and a kernel ->
// the ops that launched it themselves (kernel_launchers: they add up to the kernel row). Pure data shaping, no DOM:
// the page inlines this file before app.js; it defines one global, TorchscopeChain.

const TorchscopeChain = (() => {
  /** @typedef {{name: string, input_dims: string | null, calls: number, device_total_us: number, device_self_us: number}} ShapeRow */
  /** @typedef {{name: string, input_dims: string | null, stack: string, calls: number, host_total_us: number}} StackRow */
  /** @typedef {{op_name: string, input_dims: string | null, name: string, count: number, total_us: number, self_count: number, self_total_us: number}} KernelRow */
  /** @typedef {{name: string, op_name: string, count: number, total_us: number, ops: number}} Launcher */
  /** @typedef {{operators_by_shape?: ShapeRow[], call_stacks?: StackRow[], kernels_by_op?: KernelRow[], kernel_launchers?: Launcher[]}} Report */

  const OTHER = "(other kernels)";
  const OTHER_OPS = "(other ops)";

  /** The input-shape rows of one op, in the report's order (device, then host time).
   * @param {Report} r @param {string} op @returns {ShapeRow[]} */
  function shapes(r, op) {
    return (r.operators_by_shape || []).filter((x) => x.name === op);
  }

  /** @param {{input_dims: string | null}} x @param {string | null} dims */
  const sameDims = (x, dims) => (x.input_dims ?? null) === (dims ?? null);

  /** The call stacks of one op row (name and input shape).
   * @param {Report} r @param {string} op @param {string | null} dims @returns {StackRow[]} */
  function stacks(r, op, dims) {
    return (r.call_stacks || []).filter((x) => x.name === op && sameDims(x, dims));
  }

  /** The device work one op row launched, itself or through the ops it calls.
   * @param {Report} r @param {string} op @param {string | null} dims @returns {KernelRow[]} */
  function kernels(r, op, dims) {
    return (r.kernels_by_op || []).filter((x) => x.op_name === op && sameDims(x, dims));
  }

  /** Sum of a field over rows, in whole nanoseconds (the report's µs are exact to the ns), so
   * a shape row's kernels add up to its device total without float drift.
   * @param {Record<string, any>[]} rows @param {string} key @returns {number} */
  function sumUs(rows, key) {
    let ns = 0;
    for (const x of rows) ns += Math.round(Number(x[key] || 0) * 1000);
    return ns / 1000;
  }

  /** The ops that launched a kernel themselves (the innermost op), from the report's
   * kernel_launchers: all of them, the top few then "(other ops)", so they add up to the kernel row.
   * @param {Report} r @param {string} kernel @returns {Launcher[]} */
  function launchers(r, kernel) {
    return (r.kernel_launchers || []).filter((x) => x.name === kernel);
  }

  return { OTHER, OTHER_OPS, shapes, stacks, kernels, sumUs, launchers };
})();
