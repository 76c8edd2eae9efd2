// @ts-check
// The operators drill-down as a chain, from the report's own rows: op -> its input-shape rows
// (operators_by_shape) -> a shape's call stacks (call_stacks) and the device work it launched
// (kernels_by_op, inclusive: its rows add up to the shape row's device total); and a kernel ->
// the ops that launched it themselves (kernel_launchers: they add up to the kernel row). Pure data shaping, no DOM:
// the page inlines this file before app.js; it defines one global, TorchscopeChain.

const TorchscopeChain = (() => {
  /** @typedef {{name: string, kind?: string, input_dims: string | null, calls: number, device_total_us: number, device_self_us: number, shapes?: number}} ShapeRow */
  /** @typedef {{record_shapes?: boolean, with_stack?: boolean}} Meta */
  /** @typedef {{name: string, input_dims: string | null, stack: string, calls: number, host_total_us: number}} StackRow */
  /** @typedef {{op_name: string, input_dims: string | null, name: string, count: number, total_us: number, self_count: number, self_total_us: number}} KernelRow */
  /** @typedef {{name: string, op_name: string, count: number, total_us: number, ops: number}} Launcher */
  /** @typedef {{operators_by_shape?: ShapeRow[], call_stacks?: StackRow[], kernels_by_op?: KernelRow[], kernel_launchers?: Launcher[]}} Report */

  const OTHER = "(other kernels)";
  const OTHER_OPS = "(other ops)";
  const OTHER_SHAPES = "(other shapes)";
  const ANNOTATION = "user_annotation";

  /** What stands in for a row's missing input shapes: an annotation has none; an op has none
   * recorded only when the profiler ran without record_shapes (the report's meta says which).
   * @param {Meta | undefined} meta @param {string | undefined} kind @returns {string} */
  function noShapes(meta, kind) {
    if (kind === ANNOTATION) return "(none: an annotation has no inputs)";
    if (meta && meta.record_shapes === false) return "(not recorded: profile with record_shapes=True)";
    return "(none: no tensor inputs recorded)";
  }

  /** Why a shape row has no call stacks, in the same way.
   * @param {Meta | undefined} meta @param {string | undefined} kind @returns {string} */
  function noStacks(meta, kind) {
    if (kind === ANNOTATION) return "none: Python call stacks are kept for ops, not annotations";
    if (meta && meta.with_stack === false) return "none: the trace has no Python stacks (profile with with_stack=True)";
    return "none recorded for these calls";
  }

  /** How an op's shape rows cover its calls: null when they are the op's whole set, one shape
   * each; else the sentence the page shows ("N of M calls" when rows are missing).
   * @param {ShapeRow[]} rows @param {{calls?: number}} op @returns {string | null} */
  function shapeCoverage(rows, op) {
    const calls = rows.reduce((a, x) => a + x.calls, 0), all = Number(op.calls || 0);
    const other = rows.find((x) => x.input_dims === OTHER_SHAPES);
    if (calls < all) return `${calls.toLocaleString("en-US")} of ${all.toLocaleString("en-US")} calls: the report keeps only these rows`;
    if (!other) return null;
    const top = calls - other.calls, n = rows.length - 1 + (other.shapes || 1);
    return `the top ${rows.length - 1} of ${n} input shapes: ${top.toLocaleString("en-US")} of ${all.toLocaleString("en-US")} calls; ${OTHER_SHAPES} holds the other ${other.shapes || 1}`;
  }

  /** Whether a click on the op may open its one shape row at once: only when it is the op's whole set.
   * @param {ShapeRow[]} rows @param {{calls?: number}} op */
  const opensAtOnce = (rows, op) => rows.length === 1 && rows[0].input_dims !== OTHER_SHAPES && rows[0].calls === Number(op.calls || 0);

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

  return { OTHER, OTHER_OPS, OTHER_SHAPES, noShapes, noStacks, shapeCoverage, opensAtOnce, shapes, stacks, kernels, sumUs, launchers };
})();
