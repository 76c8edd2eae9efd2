/*
 * _inflate: a large trace file's text, a block at a time, made without holding the GIL.
 *
 * Why: a file over 64 MB is read as it inflates (files.TextStream), on the prefetch's thread
 * while the command imports Polars and NumPy. CPython's zlib inflates without the GIL, but
 * gathers each block's output from its growing buffers with the GIL held (a 16 MB copy into
 * fresh pages, a few ms), and the pieces' reader then joined each block to the text left
 * from the one before (another copy). Each of those held the imports up: on 2 cores the
 * 87 MB MTIA trace's imports took 0.29 s instead of 0.17 s. Here the next block is inflated
 * (or, for a plain file, copied) straight into the buffer it is handed out in, after the
 * text it continues, all without the GIL; only reading the file's bytes (the caller's
 * ``more``, whose read releases it too) and making the buffer hold it.
 *
 * Optional, like _scan: built where zlib's header is found; without it files.py does the same
 * with Python's zlib.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <string.h>
#include <zlib.h>

/* zlib counts in uInt: feed it at most this much at a time */
#define ZCHUNK ((Py_ssize_t)1 << 30)

static PyObject *InflateError;

typedef struct {
    PyObject_HEAD
    int gzipped;       /* inflate gzip members; else copy the bytes as they are */
    int started;       /* inflateInit2 done (the first member's header is being read) */
    int in_member;     /* inside a gzip member (between its header and its end) */
    int done;          /* no more text: the input ended at a member's end (or, plain, at all) */
    int busy;          /* a fill() is running (on another thread): refuse a second */
    int truncated;     /* the input ended inside a member: the text is what it inflated to */
    Py_ssize_t after;  /* bytes after the last member that are not gzip (left out), */
    int after_zeros;   /* ... all of them zeros (padding) */
    z_stream zs;
    PyObject *input;   /* bytes: the file's bytes read and not consumed yet, from `at` */
    Py_ssize_t at;
} Filler;

static void filler_dealloc(Filler *self)
{
    if (self->started)
        inflateEnd(&self->zs);
    Py_XDECREF(self->input);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int filler_init(Filler *self, PyObject *args, PyObject *kwargs)
{
    static char *KEYWORDS[] = {"gzipped", NULL};
    int gzipped = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:Filler", KEYWORDS, &gzipped))
        return -1;
    self->gzipped = gzipped;
    return 0;
}

static Py_ssize_t left(Filler *self)
{
    return self->input ? PyBytes_GET_SIZE(self->input) - self->at : 0;
}

/* More of the file's bytes from `more()` when none are left: 1, or 0 at its end (b""), or -1
 * with its error set. */
static int refill(Filler *self, PyObject *more)
{
    if (left(self) > 0)
        return 1;
    PyObject *got = PyObject_CallNoArgs(more);
    if (!got)
        return -1;
    if (!PyBytes_Check(got)) {
        Py_DECREF(got);
        PyErr_SetString(PyExc_TypeError, "Filler.fill: more() must return bytes");
        return -1;
    }
    Py_XSETREF(self->input, got);
    self->at = 0;
    return PyBytes_GET_SIZE(got) > 0;
}

/* Counts the rest of the input, the bytes after the last member that are not gzip (padding,
 * a line appended): the text ends before them, as Python's reading of the whole file ends
 * (files._inflate_salvage). 0, or -1 with more()'s error set. */
static int skip_rest(Filler *self, PyObject *more)
{
    self->after_zeros = 1;
    int got;
    while ((got = refill(self, more)) > 0) {
        const char *p = PyBytes_AS_STRING(self->input) + self->at;
        Py_ssize_t n = left(self);
        for (Py_ssize_t i = 0; i < n && self->after_zeros; i++)
            self->after_zeros = p[i] == 0;
        self->after += n;
        self->at += n;
    }
    return got;
}

/* The next member's start, between two members: 1 (a gzip member follows), 0 (the input
 * ended, or what follows is not gzip: the text is done), -1 (an error set: more() failed). */
static int next_member(Filler *self, PyObject *more)
{
    int got = refill(self, more);
    if (got <= 0)
        return got;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(self->input) + self->at;
    if (p[0] != 0x1f || (left(self) > 1 && p[1] != 0x8b))
        return self->started ? skip_rest(self, more) : (PyErr_SetString(InflateError, "not gzip"), -1);
    int rc = self->started ? inflateReset(&self->zs) : inflateInit2(&self->zs, 15 + 16);
    if (rc != Z_OK) {
        if (rc == Z_MEM_ERROR)
            PyErr_NoMemory();
        else
            PyErr_Format(InflateError, "corrupt gzip (zlib could not start: %d)", rc);
        return -1;
    }
    self->started = 1;
    self->in_member = 1;
    return 1;
}

/* Up to `room` bytes of text written at `out`: inflated (the member's end stops it) or copied,
 * without the GIL. Returns how many, or -1 with an error set (corrupt data). */
static Py_ssize_t produce(Filler *self, char *out, Py_ssize_t room)
{
    const char *in = PyBytes_AS_STRING(self->input) + self->at;
    Py_ssize_t avail = left(self), made = 0, used = 0;
    int rc = Z_OK, stuck = 0;
    Py_BEGIN_ALLOW_THREADS
    if (!self->gzipped) {
        made = used = avail < room ? avail : room;
        memcpy(out, in, (size_t)made);
    } else {
        while (made < room && used < avail && rc == Z_OK) {
            Py_ssize_t give = avail - used, want = room - made;
            self->zs.next_in = (Bytef *)(in + used);
            self->zs.avail_in = (uInt)(give < ZCHUNK ? give : ZCHUNK);
            self->zs.next_out = (Bytef *)(out + made);
            self->zs.avail_out = (uInt)(want < ZCHUNK ? want : ZCHUNK);
            uInt in_before = self->zs.avail_in, out_before = self->zs.avail_out;
            rc = inflate(&self->zs, Z_SYNC_FLUSH); /* as Python's zlib: all it can */
            used += in_before - self->zs.avail_in;
            made += out_before - self->zs.avail_out;
            if (in_before == self->zs.avail_in && out_before == self->zs.avail_out) {
                stuck = rc == Z_OK || rc == Z_BUF_ERROR; /* zlib says it always moves on: never spin */
                break;
            }
            if (rc == Z_BUF_ERROR) /* it wants more input or room: not an error */
                rc = Z_OK;
        }
    }
    Py_END_ALLOW_THREADS
    self->at += used;
    if (stuck) {
        PyErr_SetString(InflateError, "corrupt gzip (inflating it makes no progress)");
        return -1;
    }
    if (rc == Z_STREAM_END) {
        self->in_member = 0;
    } else if (rc != Z_OK) {
        if (rc == Z_MEM_ERROR)
            PyErr_NoMemory();
        else
            PyErr_Format(InflateError, "corrupt gzip (%s)", self->zs.msg ? self->zs.msg : "invalid data");
        return -1;
    }
    return made;
}

/* fill(text, size, more): `text` followed by up to `size` more bytes of the file's text, or
 * None when there are none (the text is done). Reads the file's bytes with `more()` (b"" at
 * its end). InflateError for data that does not inflate; a member cut short, or bytes after
 * the last member that are not gzip, end the text, and `truncated` / `after` say so. */
static PyObject *filler_fill(Filler *self, PyObject *args)
{
    Py_buffer prefix;
    Py_ssize_t size;
    PyObject *more;
    if (!PyArg_ParseTuple(args, "y*nO:fill", &prefix, &size, &more))
        return NULL;
    if (size <= 0 || size > PY_SSIZE_T_MAX - prefix.len) {
        PyBuffer_Release(&prefix);
        PyErr_SetString(PyExc_ValueError, "Filler.fill: size must be positive");
        return NULL;
    }
    if (self->busy) {
        PyBuffer_Release(&prefix);
        PyErr_SetString(PyExc_RuntimeError, "Filler.fill: already filling on another thread");
        return NULL;
    }
    if (self->done) {
        PyBuffer_Release(&prefix);
        Py_RETURN_NONE;
    }
    self->busy = 1;
    /* the pages are not touched here: they fault in as the text is written, without the GIL */
    PyObject *out = PyBytes_FromStringAndSize(NULL, prefix.len + size);
    Py_ssize_t made = 0;
    if (!out)
        goto error;
    char *dst = PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    memcpy(dst, prefix.buf, (size_t)prefix.len);
    Py_END_ALLOW_THREADS
    dst += prefix.len;
    while (made < size) {
        if (self->gzipped && !self->in_member) {
            int rc = next_member(self, more);
            if (rc < 0)
                goto error;
            if (rc == 0) {
                self->done = 1;
                break;
            }
        }
        int got = refill(self, more);
        if (got < 0)
            goto error;
        if (got == 0) { /* the input ended: inside a member, when gzip (a copy cut short) */
            self->truncated = self->gzipped;
            self->done = 1;
            break;
        }
        Py_ssize_t n = produce(self, dst + made, size - made);
        if (n < 0)
            goto error;
        made += n;
    }
    self->busy = 0;
    PyBuffer_Release(&prefix);
    if (made == 0) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    if (made < size && _PyBytes_Resize(&out, prefix.len + made) < 0)
        return NULL;
    return out;
error:
    self->busy = 0;
    PyBuffer_Release(&prefix);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *filler_unconsumed(Filler *self, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(left(self));
}

static PyObject *filler_truncated(Filler *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->truncated);
}

static PyObject *filler_after(Filler *self, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(self->after);
}

static PyObject *filler_after_zeros(Filler *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->after > 0 && self->after_zeros);
}

static PyMethodDef FILLER_METHODS[] = {
    {"fill", (PyCFunction)filler_fill, METH_VARARGS,
     "fill(text, size, more) -> bytes | None: text followed by up to size more bytes of the file's text"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef FILLER_GETSET[] = {
    {"unconsumed", (getter)filler_unconsumed, NULL, "bytes read from the file and not used yet", NULL},
    {"truncated", (getter)filler_truncated, NULL, "the file ended inside a gzip member", NULL},
    {"after", (getter)filler_after, NULL, "bytes after the last gzip member that are not gzip", NULL},
    {"after_zeros", (getter)filler_after_zeros, NULL, "those bytes are all zeros (padding)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FillerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "torchscope.trace._inflate.Filler",
    .tp_basicsize = sizeof(Filler),
    .tp_dealloc = (destructor)filler_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A file's text, a block at a time, each after the text it continues (gzip inflated).",
    .tp_methods = FILLER_METHODS,
    .tp_getset = FILLER_GETSET,
    .tp_init = (initproc)filler_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_inflate", "A large trace file's text, a block at a time, without the GIL.", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__inflate(void)
{
    if (PyType_Ready(&FillerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&MODULE);
    if (!m)
        return NULL;
    InflateError = PyErr_NewException("torchscope.trace._inflate.InflateError", NULL, NULL);
    if (!InflateError || PyModule_AddObjectRef(m, "InflateError", InflateError) < 0 ||
        PyModule_AddObjectRef(m, "Filler", (PyObject *)&FillerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
