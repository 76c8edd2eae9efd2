"""Compare two dumps offline, without torch: align the op sequences, then compare op by op.

The two runs may not issue the same ops (an extra cast, a fused op on one device), so the
sequences are aligned on ``(op, direction)`` with difflib's longest-matching-blocks algorithm;
ops that do not align are listed, not compared. An aligned pair is compared on full tensors when
both dumps saved them, and on the statistics and sketches otherwise. Two independent runs
accumulate error, so an output passes when its relative L2 error is within the dump tolerance
for its dtype (``tolerance.DUMP_DEFAULTS``); the first divergence is the first aligned op over
tolerance whose inputs all passed. Bad dumps raise ``TraceError`` naming the file; a dump that
lost only its tensor file is compared on statistics, with a warning.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from torchscope.accuracy.dump_format import ABSENT, FORMAT, TABLES, VERSION
from torchscope.accuracy.metrics import TensorMetrics, compare_arrays
from torchscope.accuracy.result import DIVERGED, OK, RANDOM, SKIPPED, AccuracyResult, OpResult
from torchscope.accuracy.stats import SKETCH
from torchscope.accuracy.tolerance import Tolerances, is_discontinuous
from torchscope.errors import TraceError


class Dump:
    """A dump directory, read: ``meta``, ``ops`` and ``tensors`` tables, saved tensors on demand."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.warnings: list[str] = []
        meta_path = self.path / "meta.json"
        if not self.path.is_dir():
            raise TraceError(str(self.path), "no such dump directory")
        if not meta_path.is_file():
            raise TraceError(str(self.path), "not a torchscope accuracy dump (no meta.json)")
        self.meta = _read_meta(meta_path)
        files = self.meta.get("files", [])
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            self.warnings.append(f"{meta_path}: 'files' is not a list of names; reading the tables present")
            files = [p.name for p in self.path.iterdir()]
        self.ops = self._table("ops.parquet")
        self.tensors = self._table("tensors.parquet")
        # module records (format version 2, levels "all" and "module"); absent: none recorded
        has_modules = "modules.parquet" in files
        self.modules = self._table("modules.parquet") if has_modules else None
        module_tensors = self._table("module_tensors.parquet") if has_modules else None
        if self.ops.height != self.meta.get("ops", self.ops.height):
            self.warnings.append(
                f"{self.path}: meta.json says {self.meta.get('ops')} ops, ops.parquet has {self.ops.height}"
            )
        self._saved: Any = None
        st = self.path / "tensors.safetensors"
        if "tensors.safetensors" in files:
            if not st.is_file():
                self.warnings.append(f"{st}: missing; comparing statistics only")
            else:
                try:
                    from safetensors import safe_open

                    self._saved = safe_open(str(st), framework="numpy")
                except Exception as exc:
                    self.warnings.append(f"{st}: unreadable ({exc}); comparing statistics only")
        self._rows = {"op": _by_record(self.tensors), "module": _by_record(module_tensors)}

    def _table(self, name: str) -> pl.DataFrame:
        """The table ``name``, checked against the format: a column a comparison needs that is
        missing, or of a type that does not convert, is a TraceError naming the file and the
        column; another column missing is null (with a warning); rows without the values that
        align them are dropped (with a warning)."""
        p = self.path / name
        if not p.is_file():
            raise TraceError(str(p), "missing from the dump")
        try:
            table = pl.read_parquet(p)
        except Exception as exc:
            raise TraceError(str(p), f"corrupted Parquet file: {str(exc).splitlines()[0][:200]}") from None
        schema, required = TABLES[name]
        absent = [c for c in schema if c not in table.columns]
        if lost := [c for c in absent if c in required]:
            raise TraceError(
                str(p), f"missing column{'s' if len(lost) > 1 else ''} {', '.join(map(repr, lost))}"
            )
        if absent:
            self.warnings.append(f"{p}: no column {', '.join(map(repr, absent))}; compared without it")
        columns = []
        for column, dtype in schema.items():
            if column in absent:
                columns.append(pl.lit(ABSENT.get(column), dtype=dtype).alias(column))
                continue
            have = table.schema[column]
            if have != dtype:
                try:
                    table.select(pl.col(column).cast(dtype, strict=True))
                except Exception:
                    raise TraceError(str(p), f"column {column!r} holds {have}, not {dtype}") from None
            columns.append(pl.col(column).cast(dtype))
        table = table.select(columns)
        whole = table.drop_nulls(list(required))
        if name.endswith("tensors.parquet"):
            whole = whole.filter(pl.col("role").is_in(["input", "output"]))
        if whole.height < table.height:
            self.warnings.append(
                f"{p}: {table.height - whole.height} of {table.height} rows lack"
                f" {', '.join(required)}; those rows are not compared"
            )
        return whole

    @property
    def label(self) -> str:
        return str(self.meta.get("label") or self.path.name)

    def tensor_rows(self, index: int, role: str, record: str = "op") -> list[dict[str, Any]]:
        """The statistics rows of op (or module record) ``index``'s inputs or outputs."""
        return sorted(self._rows[record].get(index, {}).get(role, []), key=lambda r: r["position"])

    def array(self, index: int, role: str, position: int) -> np.ndarray | None:
        """The saved tensor, or None when it was not saved or cannot be read."""
        if self._saved is None:
            return None
        key = f"{index}/{role}/{position}"
        if key not in self._saved.keys():  # noqa: SIM118 (safe_open is not a mapping)
            return None
        try:
            return self._saved.get_tensor(key)  # type: ignore[no-any-return]
        except Exception as exc:
            self.warnings.append(f"{self.path / 'tensors.safetensors'}: tensor {key} unreadable ({exc})")
            return None


def _read_meta(path: Path) -> dict[str, Any]:
    """meta.json, which must be a JSON object naming our format."""
    try:
        meta = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise TraceError(str(path), f"corrupted metadata: {str(exc).splitlines()[0][:200]}") from None
    except OSError as exc:
        raise TraceError(str(path), f"cannot read: {exc.strerror or exc}") from None
    if not isinstance(meta, dict):
        raise TraceError(
            str(path), f"corrupted metadata: a JSON object expected, found {type(meta).__name__}"
        )
    if meta.get("format") != FORMAT:
        raise TraceError(str(path), f"not a torchscope accuracy dump (format {meta.get('format')!r})")
    version = meta.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= VERSION:
        # a later format may record what this reader would misread: say so, not compare
        raise TraceError(
            str(path), f"dump format version {version!r}: this torchscope reads versions 1 to {VERSION}; upgrade it"
        )
    return meta


def _by_record(tensors: pl.DataFrame | None) -> dict[int, dict[str, list[dict[str, Any]]]]:
    """Tensor rows grouped by the op (or module record) they belong to, then by role."""
    out: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for row in tensors.iter_rows(named=True) if tensors is not None else ():
        out.setdefault(row["op_index"], {"input": [], "output": []})[row["role"]].append(row)
    return out


def _stats_metrics(a: dict[str, Any], b: dict[str, Any], tol: float, floor: float = 0.0) -> TensorMetrics:
    """Compare two tensors through their statistics and sketches (``floor``: ``_error_floor``)."""
    base: dict[str, Any] = dict(
        shape=tuple(a["shape"]),
        dtype=a["dtype"],
        ref_shape=tuple(b["shape"]),
        ref_dtype=b["dtype"],
        numel=a["numel"],
    )
    if base["shape"] != base["ref_shape"]:
        return TensorMetrics(
            **base, allclose=False, problem=f"shape mismatch {base['shape']} vs {base['ref_shape']}"
        )
    exact_a, exact_b = a["checksum"] is not None, b["checksum"] is not None
    if exact_a or exact_b:
        if a["dtype"] != b["dtype"]:
            return TensorMetrics(
                **base, allclose=False, problem=f"dtype mismatch {a['dtype']} vs {b['dtype']}"
            )
        same = a["checksum"] == b["checksum"]
        return TensorMetrics(
            **base,
            allclose=same,
            error_ratio=0.0 if same else 1e6,
            problem=None if same else "integer values differ (checksums)",
        )
    counts: dict[str, Any] = dict(
        nan=a["nan"] or 0, inf=a["inf"] or 0, ref_nan=b["nan"] or 0, ref_inf=b["inf"] or 0
    )
    sa, sb = np.asarray(a["sketch"] or [], dtype=np.float64), np.asarray(b["sketch"] or [], dtype=np.float64)
    rel = cos = abs_l2 = None
    if a["numel"] == 0:
        rel, cos = 0.0, 1.0
    elif sa.size == sb.size == SKETCH:
        nb, na = float(np.linalg.norm(sb)), float(np.linalg.norm(sa))
        abs_l2 = float(np.linalg.norm(sa - sb))
        rel = abs_l2 / nb if nb > 0 else (0.0 if abs_l2 == 0 else math.inf)
        cos = float(np.dot(sa, sb) / (na * nb)) if na > 0 and nb > 0 else (1.0 if na == nb else 0.0)
        # the norms are exact: their difference is a lower bound of the L2 error
        if a["l2"] is not None and b["l2"] is not None:
            abs_l2 = max(abs_l2, abs(a["l2"] - b["l2"]))
            if b["l2"] > 0:
                rel = max(rel, abs(a["l2"] - b["l2"]) / b["l2"])
    specials = counts["nan"] != counts["ref_nan"] or counts["inf"] != counts["ref_inf"]
    ratio = _error_ratio(rel, tol, abs_l2, floor, a["numel"])
    ok = ratio is not None and ratio <= 1.0 and not specials
    problem = None
    if specials:
        problem = f"NaN/Inf counts differ: {counts['nan']}/{counts['inf']} vs {counts['ref_nan']}/{counts['ref_inf']}"
    elif rel is None:
        problem = "no sketch to compare"
    elif not ok:
        problem = f"relative L2 error ~{rel:.3g} (from sketches) over {tol:g}"
    return TensorMetrics(
        **base,
        **counts,
        cosine=cos,
        rel_l2_error=rel,
        error_ratio=ratio if ratio is not None and math.isfinite(ratio) else None,
        max_abs_error=None,
        mean_abs_error=None,
        rmse=(rel * b["l2"] / math.sqrt(max(b["numel"], 1)))
        if rel is not None and b["l2"] is not None and math.isfinite(rel)
        else None,
        allclose=ok,
        rtol=tol,
        atol=0.0,
        problem=problem,
    )


def _full_metrics(
    x: np.ndarray, y: np.ndarray, a: dict[str, Any], b: dict[str, Any], tol: float, floor: float = 0.0
) -> TensorMetrics:
    """Compare two saved tensors; floating outputs pass on their relative L2 error, or on an
    error within ``floor`` (``_error_floor``)."""
    m = compare_arrays(x, y, dtype=a["dtype"], ref_dtype=b["dtype"], rtol=tol, atol=0.0)
    zero_ref = m.rel_l2_error is None and m.rmse is not None  # a reference of all zeros
    if a["dtype"].startswith(("int", "uint", "bool")) or (m.rel_l2_error is None and not zero_ref):
        return m  # compared exactly, or a structural problem (shape, dtype)
    specials = m.nan != m.ref_nan or m.inf != m.ref_inf
    abs_l2 = m.rmse * math.sqrt(max(m.numel, 1)) if m.rmse is not None else None
    rel = (0.0 if not abs_l2 else math.inf) if m.rel_l2_error is None else m.rel_l2_error
    ratio = _error_ratio(rel, tol, abs_l2, floor, m.numel)
    ok = ratio is not None and ratio <= 1.0 and not specials
    problem = None
    if specials:
        problem = f"NaN/Inf counts differ: {m.nan}/{m.inf} vs {m.ref_nan}/{m.ref_inf}"
    elif not ok:
        problem = f"relative L2 error {rel:.3g} over {tol:g}"
    return replace(m, allclose=ok, error_ratio=1e30 if ratio is None else ratio, problem=problem)


# a floating dtype's unit roundoff (half its machine epsilon)
_ROUNDOFF = {
    "float8_e5m2": 2.0**-3,
    "float8_e4m3fn": 2.0**-4,
    "bfloat16": 2.0**-8,
    "float16": 2.0**-11,
    "float32": 2.0**-24,
    "float64": 2.0**-53,
}
# how many roundoffs of the inputs' scale a correct op's output may be off in each element
_FLOOR_ROUNDOFFS = 64


def _error_floor(inputs: list[dict[str, Any]], output: dict[str, Any], dtype: str, tol: float) -> float:
    """The absolute error per element (RMS) that a correct op may make where its result cancels.

    An output whose exact value is about zero while its inputs are not (the gradient of
    ``sum(softmax(x))``, the sum of a layer norm's output) has a relative error of ~1 in any
    arithmetic, and a float32 run against a float64 one blamed such a correct op as the first
    divergence. Its error is still roundoff of the inputs' scale: ``_FLOOR_ROUNDOFFS`` unit
    roundoffs of the largest input RMS (at most a tenth of the relative tolerance ``tol``, so
    that in bfloat16 and float16 it stays below the errors the tolerance is there to find),
    times the square root of the reduction length when the output is smaller than the input."""
    roundoff = _ROUNDOFF.get(dtype)
    floats = [r for r in inputs if r["dtype"] in _ROUNDOFF and r["l2"] is not None and r["numel"]]
    if roundoff is None or not floats:
        return 0.0
    rms = max(float(r["l2"]) / math.sqrt(r["numel"]) for r in floats)
    reduced = max(r["numel"] for r in floats) / max(output["numel"], 1)
    return min(_FLOOR_ROUNDOFFS * roundoff, tol / 10) * rms * math.sqrt(max(reduced, 1.0))


def _error_ratio(rel: float | None, tol: float, abs_l2: float | None, floor: float, numel: int) -> float | None:
    """How far past its tolerance an output is (1.0: the edge): its relative L2 error against
    ``tol``, or where that is over, its absolute L2 error ``abs_l2`` against the floor
    (``_error_floor``, per element), whichever is less."""
    if rel is None:
        return None
    ratio = rel / tol if tol > 0 else (0.0 if rel == 0 else math.inf)
    if ratio > 1.0 and floor > 0 and abs_l2 is not None and math.isfinite(abs_l2):
        ratio = min(ratio, abs_l2 / (floor * math.sqrt(max(numel, 1))))
    return ratio


_PRECISION = ("float8_e5m2", "float8_e4m3fn", "bfloat16", "float16", "float32", "float64")


def _least_precise(dtypes: list[str]) -> str:
    """The op's least precise floating dtype: errors two runs accumulate scale with it."""
    floats = [d for d in dtypes if d in _PRECISION]
    return min(floats, key=_PRECISION.index) if floats else (dtypes[0] if dtypes else "float32")


def _compare_tensors(
    ta: Dump,
    tb: Dump,
    ia: int,
    ib: int,
    role: str,
    tolerances: Tolerances,
    op: str,
    overload: str,
    module: str,
    record: str = "op",
) -> list[TensorMetrics]:
    out = []
    rows = ta.tensor_rows(ia, "input", record) + ta.tensor_rows(ia, "output", record)
    least = _least_precise([r["dtype"] for r in rows])
    tol = tolerances.dump(op, least, overload, module)
    ref_inputs = tb.tensor_rows(ib, "input", record) if role == "output" else []
    for ra, rb in zip(ta.tensor_rows(ia, role, record), tb.tensor_rows(ib, role, record), strict=False):
        floor = _error_floor(ref_inputs, rb, least, tol) if role == "output" else 0.0
        # module records keep statistics only; ops may have saved tensors
        xa = ta.array(ia, role, ra["position"]) if record == "op" else None
        xb = tb.array(ib, role, rb["position"]) if record == "op" else None
        if xa is not None and xb is not None:
            out.append(_full_metrics(xa, xb, ra, rb, tol, floor))
        else:
            out.append(_stats_metrics(ra, rb, tol, floor))
    return out


def compare_dumps(
    target: str | Path,
    reference: str | Path,
    *,
    overrides: Mapping[str, float] | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> AccuracyResult:
    """Compare the dump ``target`` against the dump ``reference``, op by op.

    ``overrides`` maps op-name patterns to the relative L2 error allowed for that op.
    """
    ta, tb = Dump(target), Dump(reference)
    tolerances = Tolerances(
        overrides={k: (float(v), 0.0) for k, v in (overrides or {}).items()},
        include=tuple(include),
        exclude=tuple(exclude),
    )
    result = AccuracyResult(mode="dump", target=ta.label, reference=tb.label)
    result.warnings += ta.warnings + tb.warnings
    modules_align = _compare_module_calls(ta, tb, tolerances, result)
    a_ops = ta.ops.sort("index").to_dicts()
    b_ops = tb.ops.sort("index").to_dicts()
    if not a_ops or not b_ops:
        if result.module_calls:  # dumps of module calls only (level "module"): compared above
            if a_ops or b_ops:
                result.warnings.append(
                    f"{ta.path if not a_ops else tb.path}: no ops recorded; modules compared"
                )
            return result
        empty = ta.path if not a_ops else tb.path
        raise TraceError(str(empty), "the dump holds no ops and no module calls")
    keys_a = [(o["op"], o["direction"]) for o in a_ops]
    keys_b = [(o["op"], o["direction"]) for o in b_ops]
    matcher = difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False)
    pairs: list[tuple[int, int]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pairs.extend(zip(range(i1, i2), range(j1, j2), strict=True))
            continue
        result.only_in_target += [_brief(a_ops[i]) for i in range(i1, i2)]
        result.only_in_reference += [_brief(b_ops[j]) for j in range(j1, j2)]
    if not pairs and not modules_align:
        raise TraceError(
            f"{ta.path} vs {tb.path}", "no op of one dump aligns with the other: different programs?"
        )
    share = len(pairs) / max(len(a_ops), len(b_ops))
    if result.only_in_target or result.only_in_reference:
        # also when as many ops are extra on each side: two of each made the counts equal, and
        # the op that caused the divergence (an extra mul in the target) went unsaid
        extra = ", ".join(
            f"{o['op']} ({o['module'] or 'the model'}, {o['direction']})" for o in result.only_in_target[:3]
        ) + (", ..." if len(result.only_in_target) > 3 else "")
        result.warnings.append(
            f"the target has {len(a_ops)} ops, the reference {len(b_ops)}: {len(pairs)} aligned"
            + (f"; only in the target: {extra}" if extra else "")
        )
    if share < 0.5 and modules_align:
        # the same model running different kernels (a fused op, another decomposition)
        result.warnings.append(
            f"only {share:.0%} of ops align, but all {len(result.module_calls)} module calls do: "
            "the two runs use different kernels; see the module findings"
        )
    elif share < 0.5:
        result.warnings.append(f"only {share:.0%} of ops align: the dumps look like different programs")
    for i, j in pairs:
        oa, ob = a_ops[i], b_ops[j]
        if not tolerances.selected(oa["op"], oa["overload"], oa["module"]):
            continue
        rec = OpResult(
            index=oa["index"],
            ref_index=ob["index"],
            op=oa["op"],
            overload=oa["overload"],
            module=oa["module"],
            direction=oa["direction"],
            call_site=oa["call_site"],
            grad_fn=oa["grad_fn"],
        )
        ins = ta.tensor_rows(oa["index"], "input")
        rec.input_shapes = [list(r["shape"]) for r in ins]
        rec.dtypes = [r["dtype"] for r in ins]
        if RANDOM in (oa["status"], ob["status"]):
            rec.status, rec.note = RANDOM, "draws random numbers: output not compared"
        elif oa["status"] != OK or ob["status"] != OK:
            rec.status, rec.note = SKIPPED, oa["note"] or ob["note"]
        else:
            args = (tolerances, oa["op"], oa["overload"], oa["module"])
            rec.inputs = _compare_tensors(ta, tb, oa["index"], ob["index"], "input", *args)
            rec.outputs = _compare_tensors(ta, tb, oa["index"], ob["index"], "output", *args)
            n_out_a, n_out_b = (
                len(ta.tensor_rows(oa["index"], "output")),
                len(tb.tensor_rows(ob["index"], "output")),
            )
            if n_out_a != n_out_b:
                rec.note = f"{n_out_a} outputs vs {n_out_b}"
            rec.mutated_inputs = _new_mutations(oa, ob)
            if any(not m.allclose for m in rec.outputs) or n_out_a != n_out_b or rec.mutated_inputs:
                rec.status = DIVERGED
                if not rec.mutated_inputs:
                    _judge_cascade(rec)
        result.ops.append(rec)
    result.warnings += [w for w in ta.warnings + tb.warnings if w not in result.warnings]
    return result


def _new_mutations(oa: dict[str, Any], ob: dict[str, Any]) -> list[str]:
    """Read-only inputs the target's op wrote and the reference's did not (a version 1 dump
    recorded none). Writes both runs make are the program's, not a device's."""
    return sorted(set(oa.get("mutated_inputs") or []) - set(ob.get("mutated_inputs") or []))


def _compare_module_calls(ta: Dump, tb: Dump, tolerances: Tolerances, result: AccuracyResult) -> bool:
    """Compare the module records of two dumps, aligned by (module path, direction, call).

    Module paths name the same module on every machine, so records align exactly, however
    different the ops inside. Each record is compared like an op: its outputs over tolerance
    with its inputs within it make a divergence, and the first one in completion order (the
    innermost module) is ``result.first_module_divergence``. A backward record's inputs are
    the gradients of the call's outputs and, since a backward computes from what its forward
    saved, the forward call's inputs too. Returns whether every module call of each dump found
    its counterpart (the two runs are the same model, whatever their ops).
    """
    if ta.modules is None or tb.modules is None:
        if (ta.modules is None) != (tb.modules is None):
            lacking = ta.path if ta.modules is None else tb.path
            result.warnings.append(f"{lacking}: no module records (a level 'op' dump); modules not compared")
        return False
    refs = {(r["module"], r["direction"], r["call"]): r for r in tb.modules.to_dicts()}
    forward_inputs: dict[tuple[str, int], list[TensorMetrics]] = {}
    unmatched = 0
    for ma in ta.modules.sort("index").to_dicts():
        mb = refs.pop((ma["module"], ma["direction"], ma["call"]), None)
        name = f"nn.{ma['type']}"
        if mb is None:
            unmatched += 1
            continue
        if not tolerances.selected(name, "default", ma["module"]):
            continue
        rec = OpResult(
            index=ma["index"], ref_index=mb["index"], op=name, module=ma["module"], direction=ma["direction"]
        )
        ins = ta.tensor_rows(ma["index"], "input", "module")
        rec.input_shapes = [list(r["shape"]) for r in ins]
        rec.dtypes = [r["dtype"] for r in ins]
        if RANDOM in (ma["status"], mb["status"]):
            rec.status, rec.note = RANDOM, "random numbers drawn inside: outputs not compared"
        else:
            args = (tolerances, name, "default", ma["module"], "module")
            rec.inputs = _compare_tensors(ta, tb, ma["index"], mb["index"], "input", *args)
            rec.outputs = _compare_tensors(ta, tb, ma["index"], mb["index"], "output", *args)
            key = (ma["module"], ma["call"])
            if ma["direction"] == "forward":
                forward_inputs[key] = rec.inputs
            else:
                # a backward also computes from what its forward saved (activations, inputs):
                # it can be the root only if those agreed too
                rec.inputs = rec.inputs + forward_inputs.get(key, [])
            if any(not m.allclose for m in rec.outputs):
                rec.status = DIVERGED
                _judge_cascade(rec)
        result.module_calls.append(rec)
    if unmatched or refs:
        result.warnings.append(
            f"module calls: {unmatched} of the target and {len(refs)} of the reference have no counterpart"
        )
    return not unmatched and not refs and ta.modules.height > 0


# an op is named as the root only if it made the error at least this many times worse
AMPLIFICATION = 10.0


def _judge_cascade(rec: OpResult) -> None:
    """Mark a diverged op whose error was handed to it rather than made by it.

    Two independent runs accumulate error, so an op can cross the tolerance with inputs still
    (just) within it. Such an op is the root only if its output error is ``AMPLIFICATION``
    times its worst input error; a discontinuous op (ReLU mask, max index, comparison) fed
    inputs that differ at all is never the root: a tiny difference may flip its outputs.
    """
    in_err = max((m.rel_l2_error or 0.0 for m in rec.inputs), default=0.0)
    out_err = max(
        (m.rel_l2_error if m.rel_l2_error is not None else math.inf for m in rec.outputs), default=0.0
    )
    if is_discontinuous(rec.op) and in_err > 0:
        rec.cascade = True
        rec.note = "discontinuous op fed inputs that differ: outputs may flip; not named as the root"
    elif in_err > 0 and out_err < AMPLIFICATION * in_err:
        rec.cascade = True
        rec.note = f"error grew from {in_err:.3g} in its inputs to {out_err:.3g}: accumulated, not the root"


def _brief(o: dict[str, Any]) -> dict[str, Any]:
    return {"index": o["index"], "op": o["op"], "module": o["module"], "direction": o["direction"]}
