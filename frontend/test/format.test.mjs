// The format twins of render/units.py: the text a user reads for each unit, and (with the cases
// tests/render/test_js.py writes from Python, TORCHSCOPE_FMT_CASES) the same text as the terminal.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { page } from "./page.mjs";

const { fmt, fmtUs, fmtBytes, fmtPct, fmtCount, fmtSi } = page().TorchscopeFormat;

test("durations: ns, then µs with 1 decimal, ms and s with 3, ties rounded half-up", () => {
  assert.equal(fmtUs(0.25), "250 ns");
  assert.equal(fmtUs(1.5), "1.5 µs");
  assert.equal(fmtUs(1062.5), "1.063 ms"); // toFixed's binary tie would print 1.062
  assert.equal(fmtUs(-2500), "-2.500 ms");
  assert.equal(fmtUs(3_600_000_000), "3,600.000 s");
  assert.equal(fmtUs(null), "–");
  assert.equal(fmtUs(NaN), "–");
});

test("bytes in powers of 1024, percent, counts, SI prefixes", () => {
  assert.equal(fmtBytes(1023), "1023 B");
  assert.equal(fmtBytes(1536), "1.50 KiB");
  assert.equal(fmtBytes(6629508096), "6.17 GiB");
  assert.equal(fmtPct(12.345), "12.3 %");
  assert.equal(fmtCount(1234567), "1,234,567");
  assert.equal(fmtCount(2.5), "2.50");
  assert.equal(fmtSi(1.5e12, "FLOP/s"), "1.50 TFLOP/s");
});

test("fmt dispatches on the report's unit; timestamps relative to the trace's start", () => {
  assert.equal(fmt(1500, "us"), "1.500 ms");
  assert.equal(fmt(0.25, "fraction"), "25.0 %");
  assert.equal(fmt(1_000_100, "timestamp_us", 1_000_000), "+100.0 µs");
  assert.equal(fmt(3, "id"), "3");
  assert.equal(fmt("aten::mm", "us"), "aten::mm");
  // no unit (an accuracy metric): 4 significant digits, where the terminal prints 2 decimals
  assert.equal(fmt(0.000123456), "0.0001235");
});

test("every value prints as render/units.py prints it", (t) => {
  const path = process.env.TORCHSCOPE_FMT_CASES;
  if (!path) return t.skip("TORCHSCOPE_FMT_CASES unset: tests/render/test_js.py writes the cases from Python");
  const cases = JSON.parse(readFileSync(path, "utf8"));
  assert.ok(cases.length > 50);
  const got = cases.map(([v, unit, start]) => fmt(v, unit, start));
  assert.deepEqual(JSON.parse(JSON.stringify(got)), cases.map((c) => c[3]));
});

test("report keys as labels: words, no unit suffix, no bare unit or abbreviation", () => {
  const { pretty } = page().TorchscopeFormat;
  assert.equal(pretty("kernel_type"), "kernel type");
  assert.equal(pretty("us"), "time");
  assert.equal(pretty("pct"), "share");
  assert.equal(pretty("peak_ts_us"), "peak time");
  assert.equal(pretty("dur_us"), "duration");
  assert.equal(pretty("host_avg_us"), "host average");
  assert.equal(pretty("tensor_core_eligible"), "tensor core eligible");
});
