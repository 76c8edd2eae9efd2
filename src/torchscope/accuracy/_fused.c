/*
 * _fused: every accuracy metric of one CPU tensor against its reference, in one C call.
 *
 * Why: live compare measures every output of every op. Torch computes the metrics as a dozen
 * ops over cache-sized chunks (~60 us of dispatch per output even when the output has ten
 * elements), and numpy needs float64 copies of both sides. This reads the target in its own
 * dtype (bfloat16, float32 or float64) and the reference in L1-sized blocks, in two passes (the
 * reference's sum of squares, then everything else), accumulates every sum in double, and
 * releases the GIL while it runs (the autograd engine may run backward ops on other threads).
 *
 * The numbers are those of metrics.compare_arrays (the numpy definition) for all-finite input;
 * when either side holds a NaN or an infinity the function returns None and the caller uses
 * the numpy path, which counts and matches them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

/* element kinds of a buffer: how to read one value as a double */
enum { KIND_F64 = 0, KIND_F32 = 1, KIND_BF16 = 2 };

/* relative error is |t - r| / max(|r|, TINY), as in metrics.py */
#define TINY 1e-12

static size_t kind_size(int kind)
{
    return kind == KIND_F64 ? 8 : kind == KIND_F32 ? 4 : 2;
}

/* Elements [start, start + m) of a buffer as doubles: float64 in place, others widened into
 * out (one loop per kind: vectorizable). */
static const double *widen(const void *base, int kind, Py_ssize_t start, Py_ssize_t m, double *out)
{
    if (kind == KIND_F64) {
        return (const double *)base + start;
    } else if (kind == KIND_F32) {
        const float *f = (const float *)base + start;
        for (Py_ssize_t i = 0; i < m; i++)
            out[i] = f[i];
    } else { /* bfloat16 is the upper half of a float32 */
        const uint16_t *h = (const uint16_t *)base + start;
        for (Py_ssize_t i = 0; i < m; i++) {
            uint32_t bits = (uint32_t)h[i] << 16;
            float f;
            memcpy(&f, &bits, sizeof f);
            out[i] = f;
        }
    }
    return out;
}

/* Elements per block: both sides and the per-element terms stay in L1. */
#define BLOCK 512

typedef struct {
    double tt, tr, rr, dd, max_abs, sum_abs, max_rel, max_ratio;
    Py_ssize_t within_1, within_5, over;
} Sums;

/* The reference's sum of squares: the element bound needs its RMS before the main pass. */
static double sum_squares(const void *y, int ky, Py_ssize_t n, double *buf)
{
    double rr = 0.0;
    for (Py_ssize_t start = 0; start < n; start += BLOCK) {
        Py_ssize_t m = n - start < BLOCK ? n - start : BLOCK;
        const double *v = widen(y, ky, start, m, buf);
        for (Py_ssize_t i = 0; i < m; i++)
            rr += v[i] * v[i];
    }
    return rr;
}

/* One block of m widened elements, with d = t - r and bound = rtol * max(|r|, rms) + atol.
 * The loop has no division and no dependence between elements but its sums (which setup.py
 * lets the compiler reassociate), so it vectorizes. The three maxima (of |d|, |d| / max(|r|,
 * TINY) and |d| / bound) rarely change once a few blocks are in: the loop counts the elements
 * that beat the current ones, by multiplication, and only a block with such an element is
 * walked again to divide. On x86-64 glibc Linux with GCC (target clones need glibc's ifunc), an
 * AVX2 build sits beside the baseline one, picked at load time by the CPU (about 1.2 ns per
 * element instead of 2.2 on our CI machine). */
#if defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
static void block_pass(const double *x, const double *y, Py_ssize_t m, double rms, double rtol,
                       double atol, Sums *s)
{
    double tt = 0, tr = 0, dd = 0, sa = 0, w1 = 0, w5 = 0, over = 0;
    double beats_abs = 0, beats_rel = 0, beats_ratio = 0;
    double max_abs = s->max_abs, max_rel = s->max_rel, max_ratio = s->max_ratio;
    for (Py_ssize_t i = 0; i < m; i++) {
        double t = x[i], r = y[i], d = t - r, ad = fabs(d), ar = fabs(r);
        double den = ar > TINY ? ar : TINY, bound = (ar > rms ? ar : rms) * rtol + atol;
        tt += t * t, tr += t * r, dd += d * d, sa += ad;
        w1 += ad <= 1e-3 * den ? 1.0 : 0.0;
        w5 += ad <= 5e-3 * den ? 1.0 : 0.0;
        over += ad > bound ? 1.0 : 0.0;
        beats_abs += ad > max_abs ? 1.0 : 0.0;
        beats_rel += ad > max_rel * den ? 1.0 : 0.0;
        beats_ratio += ad > max_ratio * bound ? 1.0 : 0.0;
    }
    s->tt += tt, s->tr += tr, s->dd += dd, s->sum_abs += sa;
    s->within_1 += (Py_ssize_t)w1, s->within_5 += (Py_ssize_t)w5, s->over += (Py_ssize_t)over;
    if (beats_abs + beats_rel + beats_ratio == 0.0)
        return;
    for (Py_ssize_t i = 0; i < m; i++) {
        double ad = fabs(x[i] - y[i]), ar = fabs(y[i]);
        double den = ar > TINY ? ar : TINY, bound = (ar > rms ? ar : rms) * rtol + atol;
        if (ad > s->max_abs)
            s->max_abs = ad;
        if (ad > s->max_rel * den)
            s->max_rel = ad / den;
        if (ad > s->max_ratio * bound)
            s->max_ratio = bound > 0.0 ? ad / bound : INFINITY;
    }
}

/* Fills s; returns 0 when a value (or a sum of finite ones) is not finite. */
static int compare(const void *x, int kx, const void *y, int ky, Py_ssize_t n, double rtol,
                   double atol, Sums *s)
{
    double xb[BLOCK], yb[BLOCK];
    memset(s, 0, sizeof *s);
    s->rr = sum_squares(y, ky, n, yb);
    if (!isfinite(s->rr))
        return 0;
    double rms = sqrt(s->rr / (double)n);
    for (Py_ssize_t start = 0; start < n; start += BLOCK) {
        Py_ssize_t m = n - start < BLOCK ? n - start : BLOCK;
        block_pass(widen(x, kx, start, m, xb), widen(y, ky, start, m, yb), m, rms, rtol, atol, s);
    }
    return isfinite(s->tt) && isfinite(s->sum_abs) && isfinite(s->dd);
}

static int get_buffer(PyObject *obj, int kind, Py_ssize_t n, Py_buffer *view, const char *side)
{
    if (kind < KIND_F64 || kind > KIND_BF16) {
        PyErr_Format(PyExc_ValueError, "%s: unknown element kind %d", side, kind);
        return -1;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if ((size_t)view->len != (size_t)n * kind_size(kind)) {
        PyErr_Format(PyExc_ValueError, "%s: buffer of %zd bytes does not hold %zd elements of kind %d",
                     side, view->len, n, kind);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *metrics(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *yo;
    int kx, ky;
    Py_ssize_t n;
    double rtol, atol;
    if (!PyArg_ParseTuple(args, "OiOindd", &xo, &kx, &yo, &ky, &n, &rtol, &atol))
        return NULL;
    if (n <= 0) {
        PyErr_SetString(PyExc_ValueError, "metrics: no elements");
        return NULL;
    }
    Py_buffer xv, yv;
    if (get_buffer(xo, kx, n, &xv, "target") < 0)
        return NULL;
    if (get_buffer(yo, ky, n, &yv, "reference") < 0) {
        PyBuffer_Release(&xv);
        return NULL;
    }
    Sums s;
    int finite;
    Py_BEGIN_ALLOW_THREADS
    finite = compare(xv.buf, kx, yv.buf, ky, n, rtol, atol, &s);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&xv);
    PyBuffer_Release(&yv);
    if (!finite)
        Py_RETURN_NONE;
    return Py_BuildValue("(ddddddddnnn)", s.tt, s.tr, s.rr, s.dd, s.max_abs, s.sum_abs, s.max_rel,
                         s.max_ratio, s.within_1, s.within_5, s.over);
}

static PyMethodDef METHODS[] = {
    {"metrics", metrics, METH_VARARGS,
     "metrics(target, target_kind, reference, reference_kind, n, rtol, atol) -> tuple | None\n\n"
     "Sums and extremes of the comparison of two C-contiguous buffers of n elements (kinds: 0\n"
     "float64, 1 float32, 2 bfloat16): (t.t, t.r, r.r, d.d, max |d|, sum |d|, max rel, max\n"
     "ratio, within 1e-3, within 5e-3, over the bound). None when a value is not finite."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT,
    "_fused",
    "Accuracy metrics of a tensor against its reference in one pass (see _fused.c).",
    -1,
    METHODS,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fused(void)
{
    return PyModule_Create(&MODULE);
}
