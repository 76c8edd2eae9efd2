/*
 * _scan: Kineto trace JSON straight into typed column buffers.
 *
 * Why: decoding a trace with msgspec builds one Struct per event, and pulling ~45 columns out
 * of those Structs in Python costs more than the decoding itself. This scanner walks the text
 * once, writes each field we model directly into a growing C array, and interns strings per
 * column, so Python receives a handful of buffers (read with np.frombuffer) and short
 * lists of unique strings.
 *
 * It is deliberately narrow: it accepts only well-formed JSON whose modelled fields have the
 * types events.py declares. Anything else (a wrong type, a duplicate key, an escaped key, an
 * int beyond int64, a float that overflows, invalid UTF-8 in a string we return, ...) makes it
 * *decline* (return None) and the msgspec path, with its repairs and messages, takes over.
 * So for every input it accepts, its columns equal what msgspec gives with strict=False.
 *
 * The byte scan runs without the GIL (several ranks load in threads); Python objects are built
 * at the end with the GIL held, including the rare floats the exact fast path cannot convert.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <unistd.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* msgspec bounds nesting by Python's recursion limit (~1000 less the stack in use); stay well
 * inside it so that we never accept a document msgspec would refuse. Real traces nest < 10. */
#define MAX_DEPTH 256

typedef const unsigned char *Ptr;

/* ----------------------------------------------------------------------------------------- */
/* Outcome of a scan: OK, or why there is no result.                                          */

typedef enum { ST_OK = 0, ST_DECLINE, ST_NOMEM } Status;

/* ----------------------------------------------------------------------------------------- */
/* The columns we produce and the JSON keys that feed them.                                   */

typedef enum { K_STR, K_RAW, K_INT, K_FLOAT, K_INTSTR, K_NUM } Kind;

enum {
    C_PH, C_CAT, C_NAME, C_PID, C_TID, C_TS, C_DUR, C_ID, C_BP,
    C_EXTERNAL_ID, C_EXTERNAL_ID_2021, C_CORRELATION, C_DEVICE, C_STREAM, C_STREAM_ID, C_SEQ,
    C_FWD_TID, C_INPUT_DIMS, C_INPUT_TYPES, C_CONCRETE_INPUTS, C_GRID, C_BLOCK, C_REGISTERS_PER_THREAD,
    C_SHARED_MEMORY, C_BLOCKS_PER_SM, C_WARPS_PER_SM, C_OCCUPANCY_PCT, C_BYTES, C_DEVICE_TYPE,
    C_DEVICE_ID, C_ADDR, C_MEM_BYTES, C_TOTAL_ALLOCATED, C_TOTAL_RESERVED, C_ARG_NAME,
    C_SORT_INDEX, C_LABELS, C_ARGS_AT,
    NCOLS,
    C_ARGS = -2 /* the "args" key of an event: not a column, an object of more keys */
};

typedef struct {
    const char *name; /* output column */
    Kind kind;
} ColumnSpec;

static const ColumnSpec COLUMNS[NCOLS] = {
    [C_PH] = {"ph", K_STR},
    [C_CAT] = {"cat", K_STR},
    [C_NAME] = {"name", K_STR},
    [C_PID] = {"pid", K_INTSTR},
    [C_TID] = {"tid", K_INTSTR},
    [C_TS] = {"ts", K_NUM},
    [C_DUR] = {"dur", K_NUM},
    [C_ID] = {"id", K_INTSTR},
    [C_BP] = {"bp", K_STR},
    [C_EXTERNAL_ID] = {"external_id", K_INT},
    [C_EXTERNAL_ID_2021] = {"external_id_2021", K_INT},
    [C_CORRELATION] = {"correlation", K_INT},
    [C_DEVICE] = {"device", K_INT},
    [C_STREAM] = {"stream", K_INTSTR},
    [C_STREAM_ID] = {"stream_id", K_INTSTR},
    [C_SEQ] = {"seq", K_INT},
    [C_FWD_TID] = {"fwd_tid", K_INT},
    [C_INPUT_DIMS] = {"input_dims", K_RAW},
    [C_INPUT_TYPES] = {"input_types", K_RAW},
    [C_CONCRETE_INPUTS] = {"concrete_inputs", K_RAW},
    [C_GRID] = {"grid", K_RAW},
    [C_BLOCK] = {"block", K_RAW},
    [C_REGISTERS_PER_THREAD] = {"registers_per_thread", K_INT},
    [C_SHARED_MEMORY] = {"shared_memory", K_INT},
    [C_BLOCKS_PER_SM] = {"blocks_per_sm", K_FLOAT},
    [C_WARPS_PER_SM] = {"warps_per_sm", K_FLOAT},
    [C_OCCUPANCY_PCT] = {"occupancy_pct", K_FLOAT},
    [C_BYTES] = {"bytes", K_INT},
    [C_DEVICE_TYPE] = {"device_type", K_INT},
    [C_DEVICE_ID] = {"device_id", K_INT},
    [C_ADDR] = {"addr", K_INT},
    [C_MEM_BYTES] = {"mem_bytes", K_INT},
    [C_TOTAL_ALLOCATED] = {"total_allocated", K_INT},
    [C_TOTAL_RESERVED] = {"total_reserved", K_INT},
    [C_ARG_NAME] = {"arg_name", K_STR},
    [C_SORT_INDEX] = {"sort_index", K_INT},
    [C_LABELS] = {"labels", K_STR},
    /* not a key: where the event's "args" value starts in the buffer (value_end finds its end),
     * so that the verbatim args of the few events whose category we do not model are read from
     * the text, not by decoding the whole document a second time */
    [C_ARGS_AT] = {"args_at", K_INT},
};

typedef struct {
    const char *key; /* the JSON key, as written in the trace */
    size_t len;
    int column;
} KeySpec;

#define KEY(text, column) {text, sizeof(text) - 1, column}

static const KeySpec EVENT_KEYS[] = {
    KEY("ph", C_PH),   KEY("cat", C_CAT), KEY("name", C_NAME), KEY("pid", C_PID),
    KEY("tid", C_TID), KEY("ts", C_TS),   KEY("dur", C_DUR),   KEY("id", C_ID),
    KEY("bp", C_BP),   KEY("args", C_ARGS),
};

static const KeySpec ARGS_KEYS[] = {
    KEY("External id", C_EXTERNAL_ID),
    KEY("external id", C_EXTERNAL_ID_2021),
    KEY("correlation", C_CORRELATION),
    KEY("device", C_DEVICE),
    KEY("stream", C_STREAM),
    KEY("stream_id", C_STREAM_ID),
    KEY("Sequence number", C_SEQ),
    KEY("Fwd thread id", C_FWD_TID),
    KEY("Input Dims", C_INPUT_DIMS),
    KEY("Input type", C_INPUT_TYPES),
    KEY("Concrete Inputs", C_CONCRETE_INPUTS),
    KEY("grid", C_GRID),
    KEY("block", C_BLOCK),
    KEY("registers per thread", C_REGISTERS_PER_THREAD),
    KEY("shared memory", C_SHARED_MEMORY),
    KEY("blocks per SM", C_BLOCKS_PER_SM),
    KEY("warps per SM", C_WARPS_PER_SM),
    KEY("est. achieved occupancy %", C_OCCUPANCY_PCT),
    KEY("bytes", C_BYTES),
    KEY("Device Type", C_DEVICE_TYPE),
    KEY("Device Id", C_DEVICE_ID),
    KEY("Addr", C_ADDR),
    KEY("Bytes", C_MEM_BYTES),
    KEY("Total Allocated", C_TOTAL_ALLOCATED),
    KEY("Total Reserved", C_TOTAL_RESERVED),
    KEY("name", C_ARG_NAME),
    KEY("sort_index", C_SORT_INDEX),
    KEY("labels", C_LABELS),
};

#define N_EVENT_KEYS ((int)(sizeof(EVENT_KEYS) / sizeof(EVENT_KEYS[0])))
#define N_ARGS_KEYS ((int)(sizeof(ARGS_KEYS) / sizeof(ARGS_KEYS[0])))

/* Index of the lowest set bit of a non-zero word. */
static inline int lowest_bit(uint64_t w)
{
#if defined(__GNUC__)
    return __builtin_ctzll(w);
#else
    int i = 0;
    for (; !(w & 1); w >>= 1)
        i++;
    return i;
#endif
}

/* Which keys of a table have each length (bit i: table[i]), filled once at import: most keys
 * we meet are not ours ("Trace name", "Call stack", ...) and fail on the length alone. */
#define MAX_KEY_LEN 32
typedef struct {
    const KeySpec *table;
    uint64_t by_len[MAX_KEY_LEN];
} KeyIndex;

static KeyIndex EVENT_INDEX = {EVENT_KEYS, {0}}, ARGS_INDEX = {ARGS_KEYS, {0}};

static void index_keys(KeyIndex *index, int count)
{
    for (int i = 0; i < count; i++)
        index->by_len[index->table[i].len] |= (uint64_t)1 << i;
}

/* Index of key [s, s+n) in the table, or -1 for a key we do not model. */
static int find_key(const KeyIndex *index, Ptr s, size_t n)
{
    if (n >= MAX_KEY_LEN)
        return -1;
    for (uint64_t candidates = index->by_len[n]; candidates; candidates &= candidates - 1) {
        int i = lowest_bit(candidates);
        if (index->table[i].key[0] == (char)s[0] && memcmp(index->table[i].key, s, n) == 0)
            return i;
    }
    return -1;
}

/* ----------------------------------------------------------------------------------------- */
/* JSON lexing: whitespace, strings, numbers, literals, and skipping whole values.           */

/* Byte classes, filled once at import: JSON whitespace, and the bytes that end the plain run
 * of a string ('"', '\\', control characters). One table load beats a chain of compares. */
static unsigned char IS_WS[256], ENDS_RUN[256];

static void init_classes(void)
{
    IS_WS[' '] = IS_WS['\n'] = IS_WS['\r'] = IS_WS['\t'] = 1;
    for (int c = 0; c < 0x20; c++)
        ENDS_RUN[c] = 1;
    ENDS_RUN['"'] = ENDS_RUN['\\'] = 1;
}

static inline Ptr skip_ws(Ptr p, Ptr end)
{
    while (p < end && IS_WS[*p])
        p++;
    return p;
}

static inline int hex_digit(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20; /* lower case */
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* The four hex digits at p as a code unit, or -1. */
static long read_u4(Ptr p, Ptr end)
{
    if (end - p < 4)
        return -1;
    long u = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex_digit(p[i]);
        if (h < 0)
            return -1;
        u = (u << 4) | h;
    }
    return u;
}

/* A mask with the high bit set in each of the 8 bytes that is '"', '\\' or a control
 * character (< 0x20). Bits above the first such byte may be spurious (borrows), but the lowest
 * set bit is exact, which is all we use: whether there is one, and where the first one is. */
static inline uint64_t special_bytes(uint64_t w)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t quote = w ^ (ones * '"'), slash = w ^ (ones * '\\');
    uint64_t t = ((w - ones * 0x20) & ~w) | ((quote - ones) & ~quote) | ((slash - ones) & ~slash);
    return t & highs;
}

/* The first byte at or after p that ends a plain run of string text, or end. */
static inline Ptr plain_run(Ptr p, Ptr end)
{
#if defined(__SSE2__)
    /* 16 bytes a step where SSE2 is there (every x86-64): compare with '"' and '\\', and
     * find control characters as the bytes whose unsigned max with 0x1F is 0x1F */
    const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\');
    const __m128i ctrl = _mm_set1_epi8(0x1F);
    while (end - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)p);
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, slash)),
                                   _mm_cmpeq_epi8(_mm_max_epu8(x, ctrl), ctrl));
        unsigned mask = (unsigned)_mm_movemask_epi8(hit);
        if (mask)
            return p + lowest_bit(mask);
        p += 16;
    }
#endif
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t mask = special_bytes(w);
        if (mask) {
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            return p + (lowest_bit(mask) >> 3);
#else
            break;
#endif
        }
        p += 8;
    }
    while (p < end && !ENDS_RUN[*p])
        p++;
    return p;
}

/* Validates a string whose opening quote is just before p. Returns the position after the
 * closing quote, or NULL. Like msgspec it refuses raw control characters, unknown escapes and
 * unpaired UTF-16 surrogates, even in strings it will skip. *escaped says if a '\\' occurred. */
static Ptr scan_string(Ptr p, Ptr end, int *escaped)
{
    *escaped = 0;
    for (;;) {
        p = plain_run(p, end);
        if (p >= end || *p < 0x20)
            return NULL;
        if (*p == '"')
            return p + 1;
        *escaped = 1; /* a backslash */
        if (++p >= end)
            return NULL;
        switch (*p) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            p++;
            break;
        case 'u': {
            long u = read_u4(p + 1, end);
            if (u < 0)
                return NULL;
            p += 5;
            if (u >= 0xDC00 && u <= 0xDFFF)
                return NULL; /* a low surrogate with no high one before it */
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u')
                    return NULL;
                long low = read_u4(p + 2, end);
                if (low < 0xDC00 || low > 0xDFFF)
                    return NULL;
                p += 6;
            }
            break;
        }
        default:
            return NULL;
        }
    }
}

/* Writes the unescaped content of the validated string body [p, end) to out; returns its
 * length. Never longer than the input: every escape shrinks or keeps its size in UTF-8. */
static size_t unescape(Ptr p, Ptr end, unsigned char *out)
{
    unsigned char *o = out;
    while (p < end) {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        p++;
        switch (*p++) {
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned long cp = (unsigned long)read_u4(p, end);
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* validated: a low surrogate follows */
                unsigned long low = (unsigned long)read_u4(p + 2, end);
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            if (cp < 0x80) {
                *o++ = (unsigned char)cp;
            } else if (cp < 0x800) {
                *o++ = (unsigned char)(0xC0 | (cp >> 6));
                *o++ = (unsigned char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                *o++ = (unsigned char)(0xE0 | (cp >> 12));
                *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                *o++ = (unsigned char)(0x80 | (cp & 0x3F));
            } else {
                *o++ = (unsigned char)(0xF0 | (cp >> 18));
                *o++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
                *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                *o++ = (unsigned char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default: /* '"', '\\', '/' stand for themselves */
            *o++ = p[-1];
        }
    }
    return (size_t)(o - out);
}

/* A JSON number, read once for both validation and value. */
typedef struct {
    Ptr start, end;  /* its text */
    int is_int;      /* no fraction and no exponent */
    int int_ok;      /* is_int, and the value fits int64 (in i) */
    int64_t i;
    int fast_ok;     /* not an int, and d holds the exactly rounded double */
    double d;
    int ns_ok;       /* not an int, and ns holds the value x 1000 rounded to an integer */
    int64_t ns;
} Num;

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                               1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                               1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

#if defined(__SIZEOF_INT128__) && defined(__GNUC__)
#define HAVE_EXACT_DOUBLE 1
__extension__ typedef unsigned __int128 U128; /* GCC and Clang on 64-bit targets */

static inline int bit_length(U128 x)
{
    uint64_t hi = (uint64_t)(x >> 64), lo = (uint64_t)x;
    return hi ? 128 - __builtin_clzll(hi) : lo ? 64 - __builtin_clzll(lo) : 0;
}

/* m * 10^k10 correctly rounded (to nearest, ties to even), for 0 < m < 2^64 and
 * -22 <= k10 <= 19, in exact integer arithmetic: scale m * 10^k10 by a power of two so that
 * its integer part has 53 or 54 bits, round that integer on the bits below it, and let ldexp
 * put the exponent back (exact: the result is a normal double with a 53-bit significand).
 * Why: modern Kineto writes timestamps as microseconds with 3 decimals, 19 digits, beyond
 * the 2^53 of Clinger's fast path, and far too many to leave to the slow path. */
static double exact_double(uint64_t m, Py_ssize_t k10)
{
    U128 num = m, den = 1, p10 = 1;
    for (Py_ssize_t i = 0; i < (k10 < 0 ? -k10 : k10); i++)
        p10 *= 10;
    if (k10 >= 0)
        num *= p10; /* < 2^64 * 10^19 < 2^128 */
    else
        den = p10; /* <= 10^22 < 2^74 */
    /* num / den, shifted, has 53 or 54 bits. Nothing overflows: num < 10^38 < 2^127 when
     * k10 >= 0; otherwise den < 2^74 and a shifted num has 53 bits more than den at most */
    int shift = 53 - (bit_length(num) - bit_length(den));
    if (shift > 0)
        num <<= shift;
    else
        den <<= -shift;
    U128 q = num / den, r = num % den;
    int half, above; /* the dropped part: at least a half, and more than a half */
    if (q >> 53) {    /* 54 bits: the lowest one is the half, the remainder the rest */
        half = (int)(q & 1);
        above = half && r != 0;
        q >>= 1;
        shift -= 1;
    } else {
        half = 2 * r >= den;
        above = 2 * r > den;
    }
    if (above || (half && (q & 1))) /* ties to even */
        q++;
    return ldexp((double)q, -shift);
}

#else
#define HAVE_EXACT_DOUBLE 0
#endif

/* m * 10^exp10 as the correctly rounded double, for m < 2^64, when an exact method applies:
 * Clinger's fast path (m and 10^|exp10| are exact doubles, so one IEEE multiply or divide is
 * correctly rounded), else exact_double. 0 leaves the number to PyOS_string_to_double. */
static inline int exact_path(uint64_t m, Py_ssize_t exp10, double *out)
{
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
    if (m <= ((uint64_t)1 << 53) && exp10 >= -22 && exp10 <= 22) {
        double d = (double)m;
        *out = exp10 < 0 ? d / POW10[-exp10] : d * POW10[exp10];
        return 1;
    }
#endif
#if HAVE_EXACT_DOUBLE
    if (m != 0 && exp10 >= -22 && exp10 <= 19) {
        *out = exact_double(m, exp10);
        return 1;
    }
#endif
    (void)m;
    (void)exp10;
    (void)out;
    return 0;
}

static const uint64_t POW10_U64[] = {1ULL,
                                     10ULL,
                                     100ULL,
                                     1000ULL,
                                     10000ULL,
                                     100000ULL,
                                     1000000ULL,
                                     10000000ULL,
                                     100000000ULL,
                                     1000000000ULL,
                                     10000000000ULL,
                                     100000000000ULL,
                                     1000000000000ULL,
                                     10000000000000ULL,
                                     100000000000000ULL,
                                     1000000000000000ULL,
                                     10000000000000000ULL,
                                     100000000000000000ULL,
                                     1000000000000000000ULL,
                                     10000000000000000000ULL};

/* m * 10^(exp10 + 3) (microseconds to nanoseconds) rounded to an integer, half to even, from
 * the number's decimal digits: exact where a double is not (Kineto writes ns as three decimals
 * of microseconds, and from 2^53 ns, about 104 days of epoch time, a double's spacing in
 * microseconds exceeds a nanosecond: 1712195495502094.565 reads as ...094.5). 0 when the
 * result would not fit int64. */
static int exact_ns(uint64_t m, Py_ssize_t exp10, int neg, int64_t *out)
{
    Py_ssize_t shift = exp10 + 3;
    uint64_t q;
    if (shift >= 0) {
        if (shift > 18 || (m && m > (uint64_t)INT64_MAX / POW10_U64[shift]))
            return 0;
        q = m * POW10_U64[shift];
    } else {
        if (shift < -19) { /* m < 2^64 < 10^20 / 2: under half a nanosecond */
            *out = 0;
            return 1;
        }
        uint64_t p10 = POW10_U64[-shift], r;
        q = m / p10;
        r = m % p10;
        if (r > p10 - r || (r == p10 - r && (q & 1)))
            q++;
        if (q > (uint64_t)INT64_MAX)
            return 0;
    }
    *out = neg ? -(int64_t)q : (int64_t)q;
    return 1;
}

/* Appends the run of digits at p to m (wrapping past 19 digits; callers count them). */
static inline Ptr read_digits(Ptr p, Ptr end, uint64_t *m)
{
    uint64_t v = *m;
    for (; p < end && (unsigned)(*p - '0') < 10; p++)
        v = v * 10 + (uint64_t)(*p - '0');
    *m = v;
    return p;
}

/* Validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at p; NULL if it is not one.
 * Ints are parsed exactly; other numbers of at most 19 digits go through exact_path, and the
 * rest (longer, or far exponents) are left for PyOS_string_to_double with the GIL. */
static Ptr scan_number(Ptr p, Ptr end, Num *num)
{
    uint64_t m = 0; /* the significand's digits, exact while there are at most 19 of them */
    int neg = 0;
    Py_ssize_t frac = 0, exp10 = 0;
    Ptr digits;

    num->start = p;
    num->int_ok = num->fast_ok = num->ns_ok = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end || *p < '0' || *p > '9')
        return NULL;
    digits = p;
    if (*p == '0') {
        p++;
    } else {
        p = read_digits(p, end, &m);
    }
    Ptr int_end = p;
    num->is_int = 1;
    if (p < end && *p == '.') {
        num->is_int = 0;
        if (++p >= end || *p < '0' || *p > '9')
            return NULL;
        Ptr frac_start = p;
        p = read_digits(p, end, &m);
        frac = p - frac_start;
    }
    /* 10^19 - 1 fits 64 bits; one digit more may not (then only the slow path is exact) */
    const int big = (int_end - digits) + frac > 19;
    if (p < end && (*p == 'e' || *p == 'E')) {
        int eneg = 0;
        long e = 0;
        num->is_int = 0;
        if (++p < end && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        if (p >= end || *p < '0' || *p > '9')
            return NULL;
        for (; p < end && (unsigned)(*p - '0') < 10; p++) {
            if (e < 100000)
                e = e * 10 + (*p - '0');
        }
        exp10 = eneg ? -e : e;
    }
    num->end = p;
    if (num->is_int) {
        if (!big && neg && m <= (uint64_t)INT64_MAX + 1) {
            num->i = m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)m;
            num->int_ok = 1;
        } else if (!big && !neg && m <= (uint64_t)INT64_MAX) {
            num->i = (int64_t)m;
            num->int_ok = 1;
        }
        return p;
    }
    exp10 -= frac;
    if (!big && exp10 >= -40 && exp10 <= 40)
        num->ns_ok = exact_ns(m, exp10, neg, &num->ns);
    if (!big && exact_path(m, exp10, &num->d)) {
        num->d = neg ? -num->d : num->d;
        num->fast_ok = 1;
    }
    return p;
}

static inline Ptr skip_digits(Ptr p, Ptr end)
{
    while (p < end && (unsigned)(*p - '0') < 10)
        p++;
    return p;
}

/* The same grammar as scan_number, without computing the value: for values we skip. */
static Ptr skip_number(Ptr p, Ptr end)
{
    if (p < end && *p == '-')
        p++;
    if (p >= end || (unsigned)(*p - '0') >= 10)
        return NULL;
    p = *p == '0' ? p + 1 : skip_digits(p, end);
    if (p < end && *p == '.') {
        Ptr q = skip_digits(++p, end);
        if (q == p)
            return NULL;
        p = q;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        if (++p < end && (*p == '+' || *p == '-'))
            p++;
        Ptr q = skip_digits(p, end);
        if (q == p)
            return NULL;
        p = q;
    }
    return p;
}

/* "true", "false" or "null" at p; the position after it, or NULL. */
static Ptr scan_literal(Ptr p, Ptr end)
{
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if ((size_t)(end - p) >= n && memcmp(p, words[i], n) == 0)
            return p + n;
    }
    return NULL;
}

static inline int is_null(Ptr p, Ptr end)
{
    return end - p >= 4 && memcmp(p, "null", 4) == 0;
}

/* A number JSON has no word for, as writers put it where a number goes: Python's json
 * (NaN, Infinity, -Infinity) and C++ streams and fmt, which Kineto's writer used (inf, -inf,
 * nan, -nan: "memory bandwidth (GB/s)": inf, for a memcpy of zero duration). The position
 * after it, or NULL. The reader takes each as null and says how many, as json_repair does
 * for the decoder that reads what the scanner declines. */
static Ptr nonfinite_token(Ptr p, Ptr end)
{
    static const char *const words[] = {"NaN", "Infinity", "nan", "inf"};
    if (p < end && *p == '-')
        p++;
    for (int i = 0; i < 4; i++) {
        size_t n = strlen(words[i]);
        if ((size_t)(end - p) >= n && memcmp(p, words[i], n) == 0)
            return p + n;
    }
    return NULL;
}

static Ptr skip_value_counting(Ptr p, Ptr end, int depth, size_t *nonfinite);

/* Validates any JSON value at p (already past whitespace) nested `depth` containers deep;
 * returns the position after it, or NULL (invalid, or nested deeper than MAX_DEPTH). */
static Ptr skip_value(Ptr p, Ptr end, int depth)
{
    return skip_value_counting(p, end, depth, NULL);
}

/* skip_value that also takes the words of nonfinite_token for numbers, counting them in
 * `*nonfinite`; with NULL, it refuses them as skip_value does. */
static Ptr skip_value_counting(Ptr p, Ptr end, int depth, size_t *nonfinite)
{
    int escaped;
    Ptr q;
    if (p >= end)
        return NULL;
    switch (*p) {
    case '"':
        return scan_string(p + 1, end, &escaped);
    case '{':
    case '[': {
        const unsigned char close = *p == '{' ? '}' : ']';
        const int is_object = *p == '{';
        if (depth + 1 > MAX_DEPTH)
            return NULL;
        p = skip_ws(p + 1, end);
        if (p < end && *p == close)
            return p + 1;
        for (;;) {
            if (is_object) {
                if (p >= end || *p != '"' || !(p = scan_string(p + 1, end, &escaped)))
                    return NULL;
                p = skip_ws(p, end);
                if (p >= end || *p != ':')
                    return NULL;
                p = skip_ws(p + 1, end);
            }
            if (!(p = skip_value_counting(p, end, depth + 1, nonfinite)))
                return NULL;
            p = skip_ws(p, end);
            if (p < end && *p == close)
                return p + 1;
            if (p >= end || *p != ',')
                return NULL;
            p = skip_ws(p + 1, end); /* a trailing comma fails on the next round */
        }
    }
    case 't':
    case 'f':
    case 'n':
        q = scan_literal(p, end);
        break;
    default:
        q = skip_number(p, end);
        break;
    }
    /* only where JSON's own grammar failed: the words cost nothing on the common path */
    if (!q && nonfinite && (q = nonfinite_token(p, end)))
        ++*nonfinite;
    return q;
}

/* ----------------------------------------------------------------------------------------- */
/* Memory without the GIL: plain malloc. An arena for unescaped strings, whose chunks never
 * move (the intern tables point into them), and an intern table per string column.         */

typedef struct Chunk {
    struct Chunk *next;
    size_t used, size;
    unsigned char data[];
} Chunk;

typedef struct {
    Chunk *head;
} Arena;

static unsigned char *arena_alloc(Arena *a, size_t n)
{
    Chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > 65536 ? n : 65536;
        c = malloc(sizeof(Chunk) + size);
        if (!c)
            return NULL;
        c->next = a->head;
        c->used = 0;
        c->size = size;
        a->head = c;
    }
    unsigned char *out = c->data + c->used;
    c->used += n;
    return out;
}

/* Gives back the tail of the latest allocation (its unused part, or all of it). */
static void arena_shrink(Arena *a, size_t n)
{
    a->head->used -= n;
}

static void arena_free(Arena *a)
{
    while (a->head) {
        Chunk *next = a->head->next;
        free(a->head);
        a->head = next;
    }
}

typedef struct {
    Ptr ptr;
    size_t len;
    uint64_t hash;
} Entry;

typedef struct {
    int32_t *slots; /* index into entries, -1 when empty; size is a power of two */
    size_t mask;
    Entry *entries; /* the uniques, in code order */
    size_t n, cap;
} Intern;

static uint64_t hash_bytes(Ptr p, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

static int intern_grow(Intern *t)
{
    size_t size = t->slots ? (t->mask + 1) * 2 : 64;
    int32_t *slots = malloc(size * sizeof(int32_t));
    if (!slots)
        return -1;
    memset(slots, 0xFF, size * sizeof(int32_t));
    for (size_t i = 0; i < t->n; i++) {
        size_t j = t->entries[i].hash & (size - 1);
        while (slots[j] >= 0)
            j = (j + 1) & (size - 1);
        slots[j] = (int32_t)i;
    }
    free(t->slots);
    t->slots = slots;
    t->mask = size - 1;
    return 0;
}

/* The code of bytes [p, p+n); *added says whether it is new (the caller may keep p alive
 * only then). -1 when out of memory. */
static int32_t intern(Intern *t, Ptr p, size_t n, int *added)
{
    uint64_t h = hash_bytes(p, n);
    *added = 0;
    if (!t->slots && intern_grow(t) < 0)
        return -1;
    size_t j = h & t->mask;
    for (int32_t k; (k = t->slots[j]) >= 0; j = (j + 1) & t->mask) {
        const Entry *e = &t->entries[k];
        if (e->hash == h && e->len == n && memcmp(e->ptr, p, n) == 0)
            return k;
    }
    if (t->n >= INT32_MAX)
        return -1;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        Entry *entries = realloc(t->entries, cap * sizeof(Entry));
        if (!entries)
            return -1;
        t->entries = entries;
        t->cap = cap;
    }
    int32_t code = (int32_t)t->n++;
    t->entries[code] = (Entry){p, n, h};
    t->slots[j] = code;
    if (t->n * 2 > t->mask + 1 && intern_grow(t) < 0)
        return -1;
    *added = 1;
    return code;
}

static void intern_free(Intern *t)
{
    free(t->slots);
    free(t->entries);
}

/* ----------------------------------------------------------------------------------------- */
/* Column buffers. A column is allocated when an event first has its field; columns no event
 * has stay NULL and come out as None. Rows get the "missing" value lazily, when a later row
 * first writes the column or at the end (`filled`): capacity never written is never touched,
 * so an overestimated or doubled capacity costs address space, not resident memory.        */

typedef struct {
    int active;
    Py_ssize_t filled; /* rows [0, filled) hold a value or "missing" */
    Py_ssize_t cap;    /* rows its buffers hold */
    int32_t *codes;  /* str, raw, intstr */
    int64_t *ints;   /* int, intstr, num */
    double *floats;  /* float, num */
    uint8_t *flags;  /* int: present; intstr: 0/1 int/2 str; num: 0/1 int/2 float */
    Intern intern;   /* str, raw, intstr */
} Column;

/* A float the fast path could not convert: converted with the GIL at the end. */
typedef struct {
    int column;
    Py_ssize_t row;
    Ptr start;
    size_t len;
} Pending;

typedef struct {
    Ptr data, end;
    Ptr base;          /* the start of the caller's buffer: args_at counts from it */
    Py_ssize_t n, cap; /* rows written, rows allocated */
    Column cols[NCOLS];
    int order[NCOLS];  /* active columns, in activation order */
    int nactive;
    Arena arena;
    Pending *pending;
    size_t npending, cappending;
    Status status;
    int nested;     /* scanning inside the document: the events end at the array's ']' */
    Ptr close;      /* nested: where that ']' is */
    Ptr released;   /* release_pages: the text before this is no longer mapped in */
    size_t nonfinite; /* NaN, inf, ... read as missing (nonfinite_token) */
} Scanner;

/* Rows [from, to) of a column set to "missing"; rows with a value overwrite it later. */
static void set_missing(Column *c, Py_ssize_t from, Py_ssize_t to)
{
    if (to - from == 1) { /* the common case, a column every row has: stores, not memset calls */
        if (c->codes)
            c->codes[from] = -1;
        if (c->ints)
            c->ints[from] = 0;
        if (c->flags)
            c->flags[from] = 0;
        if (c->floats)
            c->floats[from] = NAN;
        return;
    }
    size_t n = (size_t)(to - from);
    if (c->codes)
        memset(c->codes + from, 0xFF, n * sizeof(int32_t)); /* -1 */
    if (c->ints)
        memset(c->ints + from, 0, n * sizeof(int64_t));
    if (c->flags)
        memset(c->flags + from, 0, n);
    if (c->floats) {
        for (Py_ssize_t r = from; r < to; r++)
            c->floats[r] = NAN;
    }
}

/* Column buffers are anonymous mappings of their own on Linux: growing one (mremap) moves its
 * pages instead of copying them. With realloc, a column grown from the heap was copied into
 * fresh pages at each doubling: a fifth of a load's page faults (nccl_rank1_of_2, by perf),
 * and page faults are what a load pays most for in its system time. Elsewhere, realloc. */
#if defined(__linux__) && defined(MREMAP_MAYMOVE)
#define MAPPED_COLUMNS 1
static size_t mapped_size(Py_ssize_t cap, size_t item)
{
    size_t page = 4096, bytes = (size_t)(cap > 0 ? cap : 1) * item;
    return (bytes + page - 1) / page * page;
}

static int resize(void **buf, Py_ssize_t old_cap, Py_ssize_t cap, size_t item)
{
    void *p = *buf ? mremap(*buf, mapped_size(old_cap, item), mapped_size(cap, item), MREMAP_MAYMOVE)
                   : mmap(NULL, mapped_size(cap, item), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    *buf = p;
    return 0;
}

static void release(void *buf, Py_ssize_t cap, size_t item)
{
    if (buf)
        munmap(buf, mapped_size(cap, item));
}
#else
#define MAPPED_COLUMNS 0
static int resize(void **buf, Py_ssize_t old_cap, Py_ssize_t cap, size_t item)
{
    (void)old_cap;
    void *p = realloc(*buf, (size_t)cap * item);
    if (!p)
        return -1;
    *buf = p;
    return 0;
}

static void release(void *buf, Py_ssize_t cap, size_t item)
{
    (void)cap;
    (void)item;
    free(buf);
}
#endif

/* Grows a column's buffers to `cap` rows (rows get their values or "missing" in column_for
 * and build_result). */
static int column_alloc(Column *c, Kind kind, Py_ssize_t cap)
{
    int need_codes = kind == K_STR || kind == K_RAW || kind == K_INTSTR;
    int need_ints = kind == K_INT || kind == K_INTSTR || kind == K_NUM;
    int need_floats = kind == K_FLOAT || kind == K_NUM;
    int need_flags = kind == K_INT || kind == K_INTSTR || kind == K_NUM;
    if ((need_codes && resize((void **)&c->codes, c->cap, cap, sizeof(int32_t)) < 0) ||
        (need_ints && resize((void **)&c->ints, c->cap, cap, sizeof(int64_t)) < 0) ||
        (need_floats && resize((void **)&c->floats, c->cap, cap, sizeof(double)) < 0) ||
        (need_flags && resize((void **)&c->flags, c->cap, cap, 1) < 0))
        return -1; /* the buffers grown so far are at least c->cap rows: freed as such */
    c->cap = cap;
    return 0;
}

/* A column's buffers given back (those handed to Python are NULL already). */
static void column_free(Column *c)
{
    release(c->codes, c->cap, sizeof(int32_t));
    release(c->ints, c->cap, sizeof(int64_t));
    release(c->floats, c->cap, sizeof(double));
    release(c->flags, c->cap, 1);
    c->codes = NULL;
    c->ints = NULL;
    c->floats = NULL;
    c->flags = NULL;
}

/* The column for the current row (s->n), activated on first use. NULL when out of memory. */
static Column *activate(Scanner *s, int col)
{
    Column *c = &s->cols[col];
    if (column_alloc(c, COLUMNS[col].kind, s->cap) < 0) {
        s->status = ST_NOMEM;
        return NULL;
    }
    c->active = 1;
    s->order[s->nactive++] = col;
    return c;
}

/* The column for a value of the current row, its rows up to this one set ("missing" until
 * written). NULL when out of memory. */
static inline Column *column_for(Scanner *s, int col)
{
    Column *c = s->cols[col].active ? &s->cols[col] : activate(s, col);
    if (c && c->filled <= s->n) {
        set_missing(c, c->filled, s->n + 1);
        c->filled = s->n + 1;
    }
    return c;
}

/* Room for one more row. */
static int start_row(Scanner *s)
{
    if (s->n < s->cap)
        return 0;
    Py_ssize_t cap = s->cap * 2;
    for (int i = 0; i < s->nactive; i++) {
        int col = s->order[i];
        if (column_alloc(&s->cols[col], COLUMNS[col].kind, cap) < 0) {
            s->status = ST_NOMEM;
            return -1;
        }
    }
    s->cap = cap;
    return 0;
}

static void scanner_free(Scanner *s)
{
    for (int i = 0; i < NCOLS; i++) {
        Column *c = &s->cols[i];
        column_free(c);
        intern_free(&c->intern);
    }
    arena_free(&s->arena);
    free(s->pending);
}

/* ----------------------------------------------------------------------------------------- */
/* Field values. Each returns the position after the value, or NULL with s->status set.      */

static Ptr decline(Scanner *s)
{
    if (s->status == ST_OK)
        s->status = ST_DECLINE;
    return NULL;
}

/* Interns the string whose body is [body, close) (unescaped first if it has escapes). */
static int32_t intern_string(Scanner *s, Column *c, Ptr body, Ptr close, int escaped)
{
    int added;
    int32_t code;
    size_t n = (size_t)(close - body);
    if (!escaped) {
        code = intern(&c->intern, body, n, &added);
    } else {
        unsigned char *buf = n ? arena_alloc(&s->arena, n) : NULL;
        if (n && !buf) {
            s->status = ST_NOMEM;
            return -1;
        }
        size_t len = unescape(body, close, buf);
        arena_shrink(&s->arena, n - len);
        code = intern(&c->intern, buf, len, &added);
        if (!added && len)
            arena_shrink(&s->arena, len);
    }
    if (code < 0)
        s->status = ST_NOMEM;
    return code;
}

static Ptr add_pending(Scanner *s, int col, const Num *num)
{
    if (s->npending == s->cappending) {
        size_t cap = s->cappending ? s->cappending * 2 : 256;
        Pending *p = realloc(s->pending, cap * sizeof(Pending));
        if (!p) {
            s->status = ST_NOMEM;
            return NULL;
        }
        s->pending = p;
        s->cappending = cap;
    }
    s->pending[s->npending++] = (Pending){col, s->n, num->start, (size_t)(num->end - num->start)};
    return num->end;
}

/* A double for a float or num column: the fast path's, or queued for later. */
static Ptr put_double(Scanner *s, int col, double *slot, const Num *num)
{
    if (num->is_int) {
        if (!num->int_ok)
            return decline(s);
        *slot = (double)num->i;
        return num->end;
    }
    if (num->fast_ok) {
        *slot = num->d;
        return num->end;
    }
    return add_pending(s, col, num);
}

/* Where a modelled value is not one the column takes: a word for a number JSON has none for
 * (nonfinite_token) is missing, as null, and counted; anything else declines the scan. Only
 * reached where the scan would decline, so the words cost nothing on the common path. */
static Ptr nonfinite_or_decline(Scanner *s, Kind kind, Ptr p)
{
    Ptr q = kind != K_STR && kind != K_RAW ? nonfinite_token(p, s->end) : NULL;
    if (!q)
        return decline(s);
    s->nonfinite++;
    return q;
}

static Ptr field_value(Scanner *s, int col, Ptr p, int depth)
{
    const Kind kind = COLUMNS[col].kind;
    Ptr end = s->end;
    Py_ssize_t r = s->n;
    Column *c;
    Num num;
    int escaped;
    Ptr q;

    if (p >= end)
        return decline(s);
    if (kind == K_RAW) {
        /* verbatim text: one holding NaN is declined, so that its text reads as the decoder's
         * (which has it null) */
        q = skip_value(p, end, depth);
        if (!q || !(c = column_for(s, col)))
            return decline(s);
        int added;
        int32_t code = intern(&c->intern, p, (size_t)(q - p), &added);
        if (code < 0) {
            s->status = ST_NOMEM;
            return NULL;
        }
        c->codes[r] = code;
        return q;
    }
    if (*p == 'n') {
        /* null is "missing", except for ph, which msgspec types as a plain str */
        if (col == C_PH || !is_null(p, end))
            return nonfinite_or_decline(s, kind, p);
        return p + 4;
    }
    if (*p == '"') {
        if (kind != K_STR && kind != K_INTSTR)
            return decline(s);
        q = scan_string(p + 1, end, &escaped);
        if (!q || !(c = column_for(s, col)))
            return decline(s);
        int32_t code = intern_string(s, c, p + 1, q - 1, escaped);
        if (code < 0)
            return NULL;
        c->codes[r] = code;
        if (kind == K_INTSTR)
            c->flags[r] = 2;
        return q;
    }
    if (!(*p == '-' || (*p >= '0' && *p <= '9')) || kind == K_STR)
        return nonfinite_or_decline(s, kind, p); /* objects, arrays, bools: no modelled field takes them */
    if (!scan_number(p, end, &num))
        return nonfinite_or_decline(s, kind, p); /* -inf, -nan */
    if (!(c = column_for(s, col)))
        return decline(s);
    switch (kind) {
    case K_INT:
    case K_INTSTR:
        if (!num.int_ok)
            return decline(s);
        c->ints[r] = num.i;
        c->flags[r] = 1;
        return num.end;
    case K_FLOAT:
        return put_double(s, col, &c->floats[r], &num);
    case K_NUM: /* flags: 1 an int (in ints), 3 a float whose exact ns are in ints */
        if (!num.is_int && !num.ns_ok)
            return decline(s); /* msgspec reads its digits exactly (a Decimal), or says why not */
        if (num.is_int && num.int_ok)
            c->ints[r] = num.i;
        else if (!num.is_int && num.ns_ok)
            c->ints[r] = num.ns;
        c->flags[r] = num.is_int ? 1 : (num.ns_ok ? 3 : 2);
        return put_double(s, col, &c->floats[r], &num);
    default:
        return decline(s);
    }
}

/* ----------------------------------------------------------------------------------------- */
/* Objects: an event, and its args.                                                            */

/* The members of an object whose '{' is just before p, keys looked up in `table`; modelled
 * keys go to field_value (or, for "args", to scan_object with the args keys). */
static Ptr scan_object(Scanner *s, Ptr p, int depth, const KeyIndex *index)
{
    Ptr end = s->end;
    uint64_t seen = 0;
    int escaped;

    if (depth > MAX_DEPTH)
        return decline(s);
    p = skip_ws(p, end);
    if (p < end && *p == '}')
        return p + 1;
    for (;;) {
        if (p >= end || *p != '"')
            return decline(s);
        Ptr key = p + 1;
        Ptr q = scan_string(key, end, &escaped);
        if (!q || escaped) /* an escaped key might spell a modelled one: not ours to judge */
            return decline(s);
        int k = find_key(index, key, (size_t)(q - 1 - key));
        p = skip_ws(q, end);
        if (p >= end || *p != ':')
            return decline(s);
        p = skip_ws(p + 1, end);
        if (k < 0) {
            p = skip_value_counting(p, end, depth, &s->nonfinite);
        } else {
            if (seen & ((uint64_t)1 << k))
                return decline(s); /* a duplicate modelled key */
            seen |= (uint64_t)1 << k;
            int column = index->table[k].column;
            if (column != C_ARGS) {
                p = field_value(s, column, p, depth);
            } else {
                Column *at;
                if (p < end && *p == '{') {
                    if (!(at = column_for(s, C_ARGS_AT)))
                        return NULL;
                    at->ints[s->n] = (int64_t)(p - s->base);
                    at->flags[s->n] = 1;
                    p = scan_object(s, p + 1, depth + 1, &ARGS_INDEX);
                } else if (is_null(p, end))
                    p += 4;
                else
                    return decline(s);
            }
        }
        if (!p)
            return decline(s);
        p = skip_ws(p, end);
        if (p < end && *p == '}')
            return p + 1;
        if (p >= end || *p != ',')
            return decline(s);
        p = skip_ws(p + 1, end);
    }
}

/* The events in [p, end): objects separated by commas, with optional whitespace. */
/* A mapped file's pages the scan has passed, unmapped from the process (their count in RSS
 * grows with the file otherwise, while the map is open); read again, they come back from the
 * page cache. Only for a read-only map of a file we own: never for memory Python allocated.
 * Called every few MB while scanning, in whole pages up to `upto`, and once at the end of a
 * scan (`last`), up to its end: the whole range a call read is then released, by this alone. */
#define RELEASE_EVERY (4 << 20)

static void release_behind(Ptr *released, Ptr upto, int last)
{
#if defined(MADV_DONTNEED) && defined(_SC_PAGESIZE)
    static uintptr_t page;
    if (!page) {
        long size = sysconf(_SC_PAGESIZE);
        page = size > 0 ? (uintptr_t)size : 4096;
    }
    if (!*released || (!last && upto - *released < RELEASE_EVERY))
        return;
    uintptr_t from = ((uintptr_t)*released + page - 1) & ~(page - 1);
    /* the last call takes the end's partial page too (madvise rounds the length up) */
    uintptr_t to = last ? (uintptr_t)upto : (uintptr_t)upto & ~(page - 1);
    if (to > from && madvise((void *)from, to - from, MADV_DONTNEED) == 0)
        *released = (Ptr)to;
#else
    (void)released;
    (void)upto;
    (void)last;
#endif
}

static void scan_all(Scanner *s, Ptr p)
{
    Ptr end = s->end;
    p = skip_ws(p, end);
    if (s->nested && p < end && *p == ']') { /* an empty array */
        s->close = p;
        return;
    }
    if (p == end) {
        if (s->nested)
            decline(s); /* truncated */
        return;
    }
    for (;;) {
        if (p >= end || *p != '{') {
            decline(s);
            return;
        }
        if (start_row(s) < 0)
            return;
        /* depth 2: the events array, then the event object */
        p = scan_object(s, p + 1, 2, &EVENT_INDEX);
        if (!p)
            return;
        s->n++;
        release_behind(&s->released, p, 0);
        p = skip_ws(p, end);
        if (s->nested && p < end && *p == ']') {
            s->close = p;
            return;
        }
        if (p == end) {
            if (s->nested)
                decline(s);
            return;
        }
        if (*p != ',') {
            decline(s);
            return;
        }
        p = skip_ws(p + 1, end);
        if (p == end) { /* a trailing comma */
            decline(s);
            return;
        }
    }
}

/* ----------------------------------------------------------------------------------------- */
/* Building the Python result (GIL held).                                                      */

static int resolve_pending(Scanner *s)
{
    char small[64];
    for (size_t i = 0; i < s->npending; i++) {
        const Pending *p = &s->pending[i];
        char *text = p->len < sizeof(small) ? small : PyMem_Malloc(p->len + 1);
        if (!text) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(text, p->start, p->len);
        text[p->len] = '\0';
        char *stop = NULL;
        double d = PyOS_string_to_double(text, &stop, NULL);
        int whole = stop == text + p->len;
        if (text != small)
            PyMem_Free(text);
        if (d == -1.0 && PyErr_Occurred())
            return -1;
        if (!whole || isinf(d)) /* msgspec refuses numbers beyond the double range */
            return 1;
        s->cols[p->column].floats[p->row] = d;
    }
    return 0;
}

/* A buffer handed to Python without a copy: a read-only, one-dimensional buffer (np.frombuffer
 * reads it) that frees its memory with its last reference. Used for nest's results and, on
 * Linux, for the scanner's columns (their mappings cut to the rows written, ``buffer``).
 * Handing over realloc'd columns had raised a load's peak by 15 MB, as their doubled capacity
 * was resident; a mapping's unwritten capacity never is, and copying the columns into bytes
 * instead had cost a third of the scan's page faults: with mapped columns, the peak of loading
 * nccl_rank1_of_2_profile_memory fell from 229 to 209 MB and a cold scan from 0.12 to 0.09 s. */
typedef struct {
    PyObject_HEAD
    void *data;
    Py_ssize_t len;
    size_t mapped; /* the data is a mapping of this many bytes (0: malloc'd) */
} Block;

static int block_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    Block *b = (Block *)self;
    static char empty[1];
    return PyBuffer_FillInfo(view, self, b->data ? b->data : empty, b->len, 1, flags);
}

static void block_dealloc(PyObject *self)
{
    Block *b = (Block *)self;
#if MAPPED_COLUMNS
    if (b->mapped) {
        munmap(b->data, b->mapped);
        Py_TYPE(self)->tp_free(self);
        return;
    }
#endif
    free(b->data);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs BLOCK_BUFFER = {block_getbuffer, NULL};

/* Equal to any buffer of the same bytes, as bytes are: results compare by value. */
static PyObject *block_richcompare(PyObject *self, PyObject *other, int op)
{
    Py_buffer view;
    if ((op != Py_EQ && op != Py_NE) || PyObject_GetBuffer(other, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    Block *b = (Block *)self;
    int same = view.len == b->len && (b->len == 0 || memcmp(view.buf, b->data, (size_t)b->len) == 0);
    PyBuffer_Release(&view);
    return PyBool_FromLong(op == Py_EQ ? same : !same);
}

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "torchscope.trace._scan.Block",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = block_dealloc,
    .tp_as_buffer = &BLOCK_BUFFER,
    .tp_richcompare = block_richcompare,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A buffer of the scanner's (read-only; read it with np.frombuffer).",
};

/* The first n items of a malloc'd buffer, handed over: the Block owns the memory from here on,
 * and the caller's pointer is cleared. */
static PyObject *handed_over(void *data, Py_ssize_t n, size_t item)
{
    void **slot = (void **)data;
    Block *b = PyObject_New(Block, &BlockType);
    if (!b)
        return NULL;
    b->data = *slot;
    b->len = n * (Py_ssize_t)item;
    b->mapped = 0;
    *slot = NULL;
    return (PyObject *)b;
}

/* The first n items of a column buffer as bytes; the C buffer is freed at once, so that a
 * result never holds two copies of more than one buffer at a time (peak memory). */
static PyObject *buffer(void *data, Py_ssize_t n, Py_ssize_t cap, size_t item)
{
    void **slot = (void **)data;
#if MAPPED_COLUMNS
    if (*slot && n > 0) { /* the mapping itself, cut to its n rows: no copy */
        size_t keep = mapped_size(n, item), have = mapped_size(cap, item);
        if (keep < have)
            munmap((char *)*slot + keep, have - keep);
        Block *b = PyObject_New(Block, &BlockType);
        if (!b) {
            munmap(*slot, keep);
            *slot = NULL;
            return NULL;
        }
        b->data = *slot;
        b->len = n * (Py_ssize_t)item;
        b->mapped = keep;
        *slot = NULL;
        return (PyObject *)b;
    }
#endif
    PyObject *out = PyBytes_FromStringAndSize(n ? (const char *)*slot : NULL, n * (Py_ssize_t)item);
    release(*slot, cap, item);
    *slot = NULL;
    return out;
}

/* The uniques as a list of str; NULL with no error set when one is not valid UTF-8. */
static PyObject *uniques(const Intern *t)
{
    PyObject *list = PyList_New((Py_ssize_t)t->n);
    if (!list)
        return NULL;
    for (size_t i = 0; i < t->n; i++) {
        PyObject *u = PyUnicode_DecodeUTF8((const char *)t->entries[i].ptr,
                                           (Py_ssize_t)t->entries[i].len, "strict");
        if (!u) {
            Py_DECREF(list);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                PyErr_Clear();
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, u);
    }
    return list;
}

static PyObject *column_value(Column *c, Kind kind, Py_ssize_t n)
{
    PyObject *u = NULL;
    if (kind == K_STR || kind == K_RAW || kind == K_INTSTR) {
        if (!(u = uniques(&c->intern)))
            return NULL;
    }
    switch (kind) {
    case K_STR:
    case K_RAW:
        return Py_BuildValue("(NN)", buffer(&c->codes, n, c->cap, 4), u);
    case K_INT:
        return Py_BuildValue("(NN)", buffer(&c->ints, n, c->cap, 8), buffer(&c->flags, n, c->cap, 1));
    case K_FLOAT:
        return buffer(&c->floats, n, c->cap, 8);
    case K_INTSTR:
        return Py_BuildValue("(NNNN)", buffer(&c->ints, n, c->cap, 8), buffer(&c->flags, n, c->cap, 1),
                             buffer(&c->codes, n, c->cap, 4), u);
    case K_NUM:
        return Py_BuildValue("(NNN)", buffer(&c->ints, n, c->cap, 8), buffer(&c->floats, n, c->cap, 8),
                             buffer(&c->flags, n, c->cap, 1));
    }
    return NULL;
}

/* The result dict, or Py_None (a declined input), or NULL with an error set. */
static PyObject *build_result(Scanner *s)
{
    int pending = resolve_pending(s);
    if (pending < 0)
        return NULL;
    if (pending > 0)
        Py_RETURN_NONE;
    PyObject *out = PyDict_New();
    if (!out)
        return NULL;
    PyObject *n = PyLong_FromSsize_t(s->n);
    if (!n || PyDict_SetItemString(out, "n", n) < 0)
        goto error;
    Py_CLEAR(n);
    if (s->nonfinite) {
        if (!(n = PyLong_FromSize_t(s->nonfinite)) || PyDict_SetItemString(out, "nonfinite", n) < 0)
            goto error;
        Py_CLEAR(n);
    }
    for (int col = 0; col < NCOLS; col++) {
        Column *c = &s->cols[col];
        PyObject *v;
        if (c->active && c->filled < s->n) /* the rows after its last value */
            set_missing(c, c->filled, s->n);
        if (!c->active) {
            v = Py_NewRef(Py_None);
        } else if (!(v = column_value(c, COLUMNS[col].kind, s->n))) {
            if (PyErr_Occurred())
                goto error;
            Py_DECREF(out); /* invalid UTF-8 in a string: decline */
            Py_RETURN_NONE;
        }
        int rc = PyDict_SetItemString(out, COLUMNS[col].name, v);
        Py_DECREF(v);
        if (rc < 0)
            goto error;
    }
    return out;
error:
    Py_XDECREF(n);
    Py_DECREF(out);
    return NULL;
}

/* Rows to allocate first for `bytes` of events: real events take 150-400 bytes, and the
 * column arrays double when they fill up anyway. */
static Py_ssize_t initial_rows(Py_ssize_t bytes)
{
    return bytes / 256 + 16;
}

static int check_releasable(PyObject *data, const char *who);

static PyObject *scan_events(PyObject *self, PyObject *args, PyObject *kwargs)
{
    Py_buffer view;
    PyObject *data;
    Py_ssize_t lo, hi;
    int release_pages = 0;
    static char *KEYWORDS[] = {"data", "lo", "hi", "release_pages", NULL};
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Onn|$p:scan_events", KEYWORDS, &data, &lo, &hi,
                                     &release_pages))
        return NULL;
    if (release_pages && check_releasable(data, "scan_events") < 0)
        return NULL;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (lo < 0 || hi < lo || hi > view.len) {
        PyErr_Format(PyExc_ValueError, "scan_events: [%zd, %zd) is not a range within the %zd bytes",
                     lo, hi, view.len);
        PyBuffer_Release(&view);
        return NULL;
    }
    Scanner s;
    memset(&s, 0, sizeof(s));
    s.base = (Ptr)view.buf;
    s.data = (Ptr)view.buf + lo;
    s.end = (Ptr)view.buf + hi;
    s.cap = initial_rows(hi - lo);
    if (release_pages)
        s.released = s.data;

    Py_BEGIN_ALLOW_THREADS
    scan_all(&s, s.data);
    release_behind(&s.released, s.end, 1);
    Py_END_ALLOW_THREADS

    PyObject *result;
    if (s.status == ST_NOMEM)
        result = PyErr_NoMemory();
    else if (s.status == ST_DECLINE)
        result = Py_NewRef(Py_None);
    else
        result = build_result(&s);
    scanner_free(&s);
    PyBuffer_Release(&view);
    return result;
}

/* ----------------------------------------------------------------------------------------- */
/* The document: where the events are, and the raw span of every other top-level key.        */

typedef struct {
    Ptr key;
    size_t key_len;
    Ptr value, value_end;
} Member;

typedef struct {
    Ptr lo, hi; /* the inside of the traceEvents array; NULL when there is none */
    Member *members;
    size_t n, cap;
    int events_seen;
    Status status;
    Scanner *events; /* when set, the events are scanned in the same pass (scan_trace) */
    Ptr released;    /* release_pages: the text before this is no longer mapped in */
} DocScan;

/* skip_value for the traceEvents array, releasing the pages behind it as it goes. */
static Ptr skip_events(DocScan *d, Ptr p, Ptr end)
{
    if (p >= end || *p != '[')
        return NULL;
    p = skip_ws(p + 1, end);
    if (p < end && *p == ']')
        return p + 1;
    size_t nonfinite = 0; /* the pieces' scans count them */
    for (;;) {
        if (!(p = skip_value_counting(p, end, 2, &nonfinite)))
            return NULL;
        release_behind(&d->released, p, 0);
        p = skip_ws(p, end);
        if (p < end && *p == ']')
            return p + 1;
        if (p >= end || *p != ',')
            return NULL;
        p = skip_ws(p + 1, end);
    }
}

static int add_member(DocScan *d, Ptr key, size_t key_len, Ptr value, Ptr value_end)
{
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 32;
        Member *m = realloc(d->members, cap * sizeof(Member));
        if (!m) {
            d->status = ST_NOMEM;
            return -1;
        }
        d->members = m;
        d->cap = cap;
    }
    d->members[d->n++] = (Member){key, key_len, value, value_end};
    return 0;
}

/* The members of the top-level object ('{' just before p); the position after '}', or NULL. */
/* The events array whose '[' is at p, scanned into d->events; the position after its ']',
 * or NULL (the scanner declined: the whole document then goes to msgspec). */
static Ptr scan_events_inline(DocScan *d, Ptr p, Ptr end)
{
    Scanner *s = d->events;
    s->data = p + 1;
    s->end = end;
    s->nested = 1;
    scan_all(s, p + 1);
    if (s->status != ST_OK) {
        if (s->status == ST_NOMEM)
            d->status = ST_NOMEM;
        return NULL;
    }
    return s->close + 1;
}

static Ptr scan_top_object(DocScan *d, Ptr p, Ptr end)
{
    static const char EVENTS[] = "traceEvents";
    int escaped;
    p = skip_ws(p, end);
    if (p < end && *p == '}')
        return p + 1;
    for (;;) {
        if (p >= end || *p != '"')
            return NULL;
        Ptr key = p + 1, q = scan_string(key, end, &escaped);
        if (!q || escaped)
            return NULL;
        size_t key_len = (size_t)(q - 1 - key);
        p = skip_ws(q, end);
        if (p >= end || *p != ':')
            return NULL;
        p = skip_ws(p + 1, end);
        Ptr value = p;
        const int is_events = key_len == sizeof(EVENTS) - 1 && memcmp(key, EVENTS, key_len) == 0;
        if (is_events && d->events) {
            if (p >= end || *p != '[' || !(p = scan_events_inline(d, p, end)))
                return NULL;
        } else if (is_events && d->released) {
            if (!(p = skip_events(d, p, end)))
                return NULL;
        } else if (!(p = skip_value(p, end, 1))) {
            return NULL;
        }
        if (is_events) {
            if (*value != '[' || d->events_seen++)
                return NULL;
            d->lo = value + 1;
            d->hi = p - 1;
        } else if (add_member(d, key, key_len, value, p) < 0) {
            return NULL;
        }
        p = skip_ws(p, end);
        if (p < end && *p == '}')
            return p + 1;
        if (p >= end || *p != ',')
            return NULL;
        p = skip_ws(p + 1, end);
    }
}

static void scan_doc(DocScan *d, Ptr p, Ptr end)
{
    p = skip_ws(p, end);
    if (p < end && *p == '{') {
        p = scan_top_object(d, p + 1, end);
    } else if (p < end && *p == '[') {
        Ptr lo = p + 1;
        if ((p = d->events ? scan_events_inline(d, p, end) : skip_value(p, end, 0))) {
            d->lo = lo;
            d->hi = p - 1;
        }
    } else {
        p = NULL;
    }
    if (p && skip_ws(p, end) != end)
        p = NULL; /* something after the top value */
    if (!p && d->status == ST_OK)
        d->status = ST_DECLINE;
}

static PyObject *doc_result(const DocScan *d, Ptr base)
{
    PyObject *keys = PyDict_New();
    if (!keys)
        return NULL;
    for (size_t i = 0; i < d->n; i++) {
        const Member *m = &d->members[i];
        PyObject *k = PyUnicode_DecodeUTF8((const char *)m->key, (Py_ssize_t)m->key_len, "strict");
        if (!k) {
            Py_DECREF(keys);
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                return NULL;
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        int dup = PyDict_Contains(keys, k);
        PyObject *span = dup ? NULL : Py_BuildValue("(nn)", m->value - base, m->value_end - base);
        if (dup || !span || PyDict_SetItem(keys, k, span) < 0) {
            Py_DECREF(k);
            Py_XDECREF(span);
            Py_DECREF(keys);
            if (dup > 0)
                Py_RETURN_NONE; /* a duplicate top-level key */
            return NULL;
        }
        Py_DECREF(k);
        Py_DECREF(span);
    }
    Py_ssize_t lo = d->lo ? d->lo - base : -1, hi = d->lo ? d->hi - base : -1;
    return Py_BuildValue("(nnN)", lo, hi, keys);
}

static PyObject *MMAP_TYPE; /* mmap.mmap, for release_pages */

/* release_pages only for a map: unmapping pages of memory Python allocated would zero it. */
static int check_releasable(PyObject *data, const char *who)
{
    int is_map = MMAP_TYPE ? PyObject_IsInstance(data, MMAP_TYPE) : 0;
    if (is_map < 0)
        return -1;
    if (!is_map) {
        PyErr_Format(PyExc_ValueError, "%s: release_pages needs an mmap.mmap", who);
        return -1;
    }
    return 0;
}

static PyObject *scan_document(PyObject *self, PyObject *args, PyObject *kwargs)
{
    Py_buffer view;
    PyObject *data;
    int release_pages = 0;
    static char *KEYWORDS[] = {"data", "release_pages", NULL};
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$p:scan_document", KEYWORDS, &data, &release_pages))
        return NULL;
    if (release_pages && check_releasable(data, "scan_document") < 0)
        return NULL;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    DocScan d;
    memset(&d, 0, sizeof(d));
    Ptr base = (Ptr)view.buf;
    if (release_pages)
        d.released = base;

    Py_BEGIN_ALLOW_THREADS
    scan_doc(&d, base, base + view.len);
    release_behind(&d.released, base + view.len, 1);
    Py_END_ALLOW_THREADS

    PyObject *result;
    if (d.status == ST_NOMEM)
        result = PyErr_NoMemory();
    else if (d.status == ST_DECLINE)
        result = Py_NewRef(Py_None);
    else
        result = doc_result(&d, base);
    free(d.members);
    PyBuffer_Release(&view);
    return result;
}

/* The document and its events in one pass: for files small enough to scan whole, this saves
 * the separate validating pass of scan_document over the events. */
static PyObject *scan_trace(PyObject *self, PyObject *args, PyObject *kwargs)
{
    Py_buffer view;
    PyObject *data;
    int release_pages = 0;
    static char *KEYWORDS[] = {"data", "release_pages", NULL};
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$p:scan_trace", KEYWORDS, &data, &release_pages))
        return NULL;
    if (release_pages && check_releasable(data, "scan_trace") < 0)
        return NULL;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    DocScan d;
    Scanner s;
    memset(&d, 0, sizeof(d));
    memset(&s, 0, sizeof(s));
    d.events = &s;
    s.cap = initial_rows(view.len);
    Ptr base = (Ptr)view.buf;
    s.base = base;
    if (release_pages)
        s.released = base;

    Py_BEGIN_ALLOW_THREADS
    scan_doc(&d, base, base + view.len);
    release_behind(&s.released, base + view.len, 1);
    Py_END_ALLOW_THREADS

    PyObject *result = NULL;
    if (d.status == ST_NOMEM || s.status == ST_NOMEM) {
        result = PyErr_NoMemory();
    } else if (d.status != ST_OK || s.status != ST_OK || !d.lo) {
        result = Py_NewRef(Py_None); /* declined, or no traceEvents: msgspec says what is wrong */
    } else {
        PyObject *doc = doc_result(&d, base);
        PyObject *events = doc && doc != Py_None ? build_result(&s) : NULL;
        if (doc == Py_None || events == Py_None)
            result = Py_NewRef(Py_None);
        else if (doc && events)
            result = Py_BuildValue("(OO)", doc, events);
        Py_XDECREF(doc);
        Py_XDECREF(events);
    }
    scanner_free(&s);
    free(d.members);
    PyBuffer_Release(&view);
    return result;
}

/* ----------------------------------------------------------------------------------------- */
/* The host call tree of a Trace in one pass (trace/derive.py says what each column means).
 *
 * `order` lists the host rows thread by thread, each thread's rows in id order (by start, then
 * longest first). A stack of the rows still open on the thread gives each row its parent: the
 * nearest earlier row of the thread that contains it (ends no earlier, and ends after it starts
 * or starts with it), the same relation derive's vectorized pointer jumping computes, in O(n).
 * The depth is the stack's height; `covered` is the union of a row's children's intervals, each
 * clipped to the row's end, and of the part of it a later row straddling its end covers (the row
 * that pops it while starting inside it), which derive subtracts from the duration to get self
 * time. */

static int int64_view(PyObject *obj, Py_buffer *view, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != 8 || !view->format || (strcmp(view->format, "l") && strcmp(view->format, "q"))) {
        PyErr_Format(PyExc_TypeError, "nest: %s must be a contiguous int64 array", what);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *nest(PyObject *self, PyObject *args)
{
    PyObject *objs[5];
    Py_buffer views[5];
    static const char *NAMES[5] = {"order", "start", "end", "pid", "tid"};
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOO:nest", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4]))
        return NULL;
    int got = 0;
    for (; got < 5; got++)
        if (int64_view(objs[got], &views[got], NAMES[got]) < 0)
            break;
    PyObject *result = NULL;
    int64_t *parent = NULL, *depth = NULL, *covered = NULL, *run = NULL, *stack = NULL;
    if (got < 5)
        goto done;
    Py_ssize_t m = views[0].len / 8, n = views[1].len / 8;
    if (views[2].len / 8 != n || views[3].len / 8 != n || views[4].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "nest: start, end, pid and tid must have one value per row");
        goto done;
    }
    const int64_t *order = views[0].buf, *start = views[1].buf, *end = views[2].buf;
    const int64_t *pid = views[3].buf, *tid = views[4].buf;
    for (Py_ssize_t k = 0; k < m; k++) {
        if (order[k] < 0 || order[k] >= n) {
            PyErr_SetString(PyExc_ValueError, "nest: a row in order is outside the table");
            goto done;
        }
    }
    size_t rows = (size_t)(n ? n : 1);
    parent = malloc(rows * 8);
    depth = malloc(rows * 8);
    covered = calloc(rows, 8);
    run = malloc(rows * 8);
    stack = malloc((size_t)(m ? m : 1) * 8);
    if (!parent || !depth || !covered || !run || !stack) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < n; r++) {
        parent[r] = -1;
        depth[r] = 0;
    }
    Py_ssize_t top = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        int64_t i = order[k];
        if (k > 0 && (pid[i] != pid[order[k - 1]] || tid[i] != tid[order[k - 1]]))
            top = 0; /* a new thread */
        while (top > 0) {
            int64_t c = stack[top - 1];
            if (end[c] >= end[i] && (end[c] > start[i] || start[c] == start[i]))
                break;
            if (start[i] < end[c]) { /* i starts inside c and ends after it: it straddles c's end, */
                /* and keeps the time they share (derive._less_straddled says why) */
                int64_t from = run[c] == INT64_MIN || run[c] < start[i] ? start[i] : run[c];
                if (end[c] > from)
                    covered[c] += end[c] - from;
            }
            top--;
        }
        run[i] = INT64_MIN; /* no child yet */
        if (top > 0) {
            int64_t p = stack[top - 1];
            parent[i] = p;
            depth[i] = top;
            int64_t e = end[i] < end[p] ? end[i] : end[p];
            int64_t prev = run[p] == INT64_MIN ? start[i] : run[p];
            int64_t from = start[i] > prev ? start[i] : prev;
            if (e > from)
                covered[p] += e - from;
            if (run[p] == INT64_MIN || e > run[p])
                run[p] = e;
        }
        stack[top++] = i;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(NNN)", handed_over(&parent, n, 8), handed_over(&depth, n, 8),
                           handed_over(&covered, n, 8));
done:
    for (int v = 0; v < got; v++)
        PyBuffer_Release(&views[v]);
    free(parent);
    free(depth);
    free(covered);
    free(run);
    free(stack);
    return result;
}

/* Where the JSON value starting at data[at] ends (an event's args, from args_at). */
static PyObject *value_end(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *data;
    Py_ssize_t at;
    (void)self;
    if (!PyArg_ParseTuple(args, "On:value_end", &data, &at))
        return NULL;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Ptr base = (Ptr)view.buf;
    size_t nonfinite = 0; /* NaN, inf, ...: the caller repairs the text as json_repair does */
    Ptr end = at >= 0 && at < view.len ? skip_value_counting(base + at, base + view.len, 2, &nonfinite) : NULL;
    PyBuffer_Release(&view);
    if (!end)
        return PyErr_Format(PyExc_ValueError, "value_end: no JSON value at %zd", at);
    return Py_BuildValue("nn", (Py_ssize_t)(end - base), (Py_ssize_t)nonfinite);
}

/* ----------------------------------------------------------------------------------------- */
/* Following a file while Kineto writes it.                                                   */
/*
 * Kineto's save writes a cycle's JSON (~190 MB/s: 0.8 s for 142 MB) on the thread that called
 * it, holding the GIL throughout, so no Python thread runs meanwhile and the other core idles.
 * A Follower is a native thread that scans the events of the file as it grows, piece by piece,
 * during that save: the bytes before the file's size are written for good (Kineto only
 * appends), and the scan needs no Python. After the save, ``complete`` lets the thread scan
 * the last pieces and end while the program goes on; when the cycle is read, ``finish`` hands
 * over what it scanned, and the reader scans only the rest (see reader._followed_batches,
 * which also checks the head and the tail this thread does not). A cycle nobody reads drops
 * its follower, which cancels the thread and frees the pieces.
 *
 * Pieces are cut where ``reader._cut_points`` cuts: at the separator Kineto writes between two
 * events ("},\n" + the first event's indentation + "{"), about `chunk` bytes apart. Each
 * piece is scanned as scan_events scans one: a cut inside a string would leave its piece
 * ending in an unterminated string (a raw newline is refused inside one), so pieces that all
 * scan were cut at true event boundaries. Anything unexpected (no such head, a declined
 * piece, no memory) ends the follow: finish() then says None, and the reader reads the file
 * as it reads any other.
 */
#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#define HAVE_FOLLOWER 1
#else
#define HAVE_FOLLOWER 0
#endif

#if HAVE_FOLLOWER
/* the head (top-level keys before the events, e.g. 8 GPUs' deviceProperties) is this small */
#define HEAD_MAX (1 << 20)
#define INDENT_MAX 256

typedef struct {
    void *map;
    size_t map_len;
    Py_ssize_t begin, end; /* the piece's bytes in the file */
    Scanner s;             /* its columns; they point into `map` until built */
} FollowedPiece;

typedef struct {
    PyObject_HEAD
    char *paths[2]; /* where Kineto writes (its temporary), and the name it renames it to */
    Py_ssize_t chunk;
    pthread_t thread;
    int running;      /* started and not yet joined */
    int stop;         /* set (atomically) once the file is complete */
    int cancel;       /* set (atomically) when nobody will take the pieces: stop scanning */
    pid_t owner;      /* the process whose thread it is: a forked child has no such thread */
    int fd;
    int failed;
    Py_ssize_t lo;       /* just after the event list's '[', or -1 until seen */
    Py_ssize_t next;     /* the next unscanned event's '{' */
    Py_ssize_t searched; /* no separator starts in [next + chunk, searched) */
    unsigned char sep[INDENT_MAX + 8];
    size_t seplen;
    FollowedPiece *pieces;
    size_t npieces, cappieces;
} Follower;

static size_t page_size(void)
{
    long size = sysconf(_SC_PAGESIZE);
    return size > 0 ? (size_t)size : 4096;
}

static void nap(void)
{
    struct timespec t = {0, 1000000}; /* 1 ms: a 16 MB piece takes Kineto ~80 ms to write */
    nanosleep(&t, NULL);
}

static int is_ws(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Where the events start in the head m[0, len), and the separator between them: 1 found, 0
 * not written yet, -1 a head this follower does not handle. */
static int find_events(Follower *f, Ptr m, size_t len)
{
    static const char KEY[] = "\"traceEvents\"";
    Ptr end = m + len, key = memmem(m, len, KEY, sizeof(KEY) - 1);
    if (!key)
        return 0;
    Ptr p = skip_ws(key + sizeof(KEY) - 1, end);
    if (p < end && *p != ':')
        return -1; /* the name as a value, not the key */
    p = p < end ? skip_ws(p + 1, end) : end;
    if (p < end && *p != '[')
        return -1;
    if (p >= end)
        return 0;
    Ptr lo = p + 1, first = lo;
    while (first < end && is_ws(*first) && first - lo < INDENT_MAX)
        first++;
    if (first == end)
        return 0;
    if (*first != '{')
        return -1; /* an empty list, padding, or not an event */
    Ptr line = first;
    while (line > lo && line[-1] != '\n')
        line--;
    if (line == lo)
        return -1; /* not one event a line */
    size_t indent = (size_t)(first - line);
    memcpy(f->sep, "},\n", 3);
    memcpy(f->sep + 3, line, indent);
    f->sep[3 + indent] = '{';
    f->seplen = indent + 4;
    f->lo = lo - m;
    f->next = first - m;
    f->searched = 0;
    return 1;
}

static int follow_head(Follower *f, Py_ssize_t size)
{
    size_t len = (size_t)(size < HEAD_MAX ? size : HEAD_MAX);
    if (len == 0)
        return 0;
    Ptr m = mmap(NULL, len, PROT_READ, MAP_SHARED, f->fd, 0);
    if (m == MAP_FAILED)
        return -1;
    int found = find_events(f, m, len);
    munmap((void *)m, len);
    if (found == 0 && len >= HEAD_MAX)
        found = -1; /* no event list in the first MB: not a Kineto head */
    return found;
}

/* Scan the next piece if the file holds one: 1 scanned, 0 not yet, -1 the follow ends. */
static int follow_piece(Follower *f, Py_ssize_t size, int complete)
{
    Py_ssize_t want = f->next + f->chunk;
    /* a complete file keeps at least half a chunk for the reader's tail, as _cut_points does */
    Py_ssize_t limit = complete ? size - f->chunk / 2 : size;
    if (want >= limit)
        return 0;
    size_t page = page_size();
    Py_ssize_t off = f->next & ~(Py_ssize_t)(page - 1);
    size_t len = (size_t)(size - off);
    Ptr m = mmap(NULL, len, PROT_READ, MAP_SHARED, f->fd, off);
    if (m == MAP_FAILED)
        return -1;
    Ptr base = m - off; /* offsets in the file: base + i is the file's byte i */
    Py_ssize_t from = want > f->searched ? want : f->searched;
    Ptr k = from < size ? memmem(base + from, (size_t)(size - from), f->sep, f->seplen) : NULL;
    if (!k || k - base >= limit) {
        if (!k)
            f->searched = size - (Py_ssize_t)f->seplen + 1 > from ? size - (Py_ssize_t)f->seplen + 1 : from;
        munmap((void *)m, len);
        return 0;
    }
    if (f->npieces == f->cappieces) {
        size_t cap = f->cappieces ? 2 * f->cappieces : 16;
        FollowedPiece *grown = realloc(f->pieces, cap * sizeof(*grown));
        if (!grown) {
            munmap((void *)m, len);
            return -1;
        }
        f->pieces = grown;
        f->cappieces = cap;
    }
    FollowedPiece *piece = &f->pieces[f->npieces];
    memset(piece, 0, sizeof(*piece));
    piece->map = (void *)m;
    piece->map_len = len;
    piece->begin = f->next;
    piece->end = (k - base) + 1; /* after the event's '}' */
    Scanner *s = &piece->s;
    s->base = base;
    s->data = base + piece->begin;
    s->end = base + piece->end;
    s->cap = initial_rows(piece->end - piece->begin);
    s->released = s->data; /* our own read-only map of the file: its pages go behind the scan */
    scan_all(s, s->data);
    release_behind(&s->released, s->end, 1);
    f->npieces++; /* even declined: finish() frees it */
    if (s->status != ST_OK)
        return -1;
    f->next = (k - base) + (Py_ssize_t)f->seplen - 1; /* the next event's '{' */
    f->searched = f->next;
    return 1;
}

static void *follow_run(void *arg)
{
    Follower *f = arg;
    for (;;) {
        if (__atomic_load_n(&f->cancel, __ATOMIC_ACQUIRE))
            break;
        int complete = __atomic_load_n(&f->stop, __ATOMIC_ACQUIRE); /* before the size */
        if (f->fd < 0) {
            /* a file written before this thread ran (a small one, a busy machine) is scanned
             * now: the result never depends on when the thread got a core */
            for (int i = 0; i < 2 && f->fd < 0; i++)
                f->fd = open(f->paths[i], O_RDONLY | O_CLOEXEC);
            if (f->fd < 0) {
                if (complete)
                    break; /* no file: the save failed */
                nap();
            }
            continue;
        }
        struct stat st;
        if (fstat(f->fd, &st) < 0) {
            f->failed = 1;
            break;
        }
        int got = f->lo < 0 ? follow_head(f, (Py_ssize_t)st.st_size)
                            : follow_piece(f, (Py_ssize_t)st.st_size, complete);
        if (got < 0) {
            f->failed = 1;
            break;
        }
        if (got == 0) {
            if (complete)
                break;
            nap();
        }
    }
    return NULL;
}

/* Whether this is a copy in a forked child (a DataLoader worker forked while the thread
 * scanned): the thread is not in this process, and the pieces may be mid-update. */
static int follower_forked(const Follower *f)
{
    return f->owner != getpid();
}

static void follower_join(Follower *f)
{
    if (f->running && follower_forked(f)) {
        f->running = 0; /* no thread to join here; what it was making is left alone */
        f->failed = 1;
        f->npieces = f->cappieces = 0;
        f->pieces = NULL;
        return;
    }
    if (f->running) {
        __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
        Py_BEGIN_ALLOW_THREADS
        pthread_join(f->thread, NULL);
        Py_END_ALLOW_THREADS
        f->running = 0;
    }
}

static void follower_clear(Follower *f)
{
    for (size_t i = 0; i < f->npieces; i++) {
        scanner_free(&f->pieces[i].s);
        munmap(f->pieces[i].map, f->pieces[i].map_len);
    }
    free(f->pieces);
    f->pieces = NULL;
    f->npieces = f->cappieces = 0;
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
}

static void follower_dealloc(Follower *f)
{
    __atomic_store_n(&f->cancel, 1, __ATOMIC_RELEASE); /* the piece being scanned is the last */
    follower_join(f);
    follower_clear(f);
    PyMem_Free(f->paths[0]);
    PyMem_Free(f->paths[1]);
    Py_TYPE(f)->tp_free((PyObject *)f);
}

static char *copy_path(PyObject *path)
{
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(path, &bytes))
        return NULL;
    const char *text = PyBytes_AS_STRING(bytes);
    char *out = PyMem_Malloc(strlen(text) + 1);
    if (out)
        strcpy(out, text);
    else
        PyErr_NoMemory();
    Py_DECREF(bytes);
    return out;
}

static PyObject *follower_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *writing, *final;
    Py_ssize_t chunk;
    static char *KEYWORDS[] = {"writing", "path", "chunk", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOn:Follower", KEYWORDS, &writing, &final, &chunk))
        return NULL;
    if (chunk < 4096)
        return PyErr_Format(PyExc_ValueError, "Follower: chunk must be at least 4096 bytes, not %zd", chunk);
    Follower *f = (Follower *)type->tp_alloc(type, 0);
    if (!f)
        return NULL;
    f->fd = -1;
    f->lo = -1;
    f->chunk = chunk;
    f->owner = getpid();
    f->paths[0] = copy_path(writing);
    f->paths[1] = f->paths[0] ? copy_path(final) : NULL;
    if (!f->paths[1]) {
        Py_DECREF(f);
        return NULL;
    }
    if (pthread_create(&f->thread, NULL, follow_run, f) == 0)
        f->running = 1;
    else
        f->failed = 1;
    return (PyObject *)f;
}

static PyObject *follower_complete(PyObject *self, PyObject *unused)
{
    (void)unused;
    __atomic_store_n(&((Follower *)self)->stop, 1, __ATOMIC_RELEASE);
    Py_RETURN_NONE;
}

static PyObject *follower_finish(PyObject *self, PyObject *unused)
{
    Follower *f = (Follower *)self;
    (void)unused;
    follower_join(f);
    PyObject *pieces = NULL, *result = NULL;
    if (f->failed || f->npieces == 0)
        goto done;
    if (!(pieces = PyList_New((Py_ssize_t)f->npieces)))
        goto done;
    for (size_t i = 0; i < f->npieces; i++) {
        FollowedPiece *p = &f->pieces[i];
        PyObject *got = build_result(&p->s); /* reads pending floats and names from the map */
        PyObject *item = got ? Py_BuildValue("(nnN)", p->begin, p->end, got) : NULL;
        if (!item)
            goto done;
        PyList_SET_ITEM(pieces, (Py_ssize_t)i, item);
    }
    result = Py_BuildValue("(nOn)", f->lo, pieces, f->next);
done:
    Py_XDECREF(pieces);
    follower_clear(f);
    f->failed = 1; /* finished: a second call says None */
    if (!result && !PyErr_Occurred())
        result = Py_NewRef(Py_None);
    return result;
}

static PyMethodDef FOLLOWER_METHODS[] = {
    {"complete", follower_complete, METH_NOARGS,
     "complete() -> None\n\n"
     "Say that the file is complete (the writer returned): the thread scans what pieces are\n"
     "left and ends, without being waited for. Dropping the follower cancels it."},
    {"finish", follower_finish, METH_NOARGS,
     "finish() -> (lo, [(begin, end, columns | None), ...], rest) | None\n\n"
     "Call once the file is complete: waits for the thread, then hands over the pieces it\n"
     "scanned (the event list starts at lo; the unscanned events start at rest). None when\n"
     "it scanned none or gave up."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FollowerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "torchscope.trace._scan.Follower",
    .tp_basicsize = sizeof(Follower),
    .tp_dealloc = (destructor)follower_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Follower(writing, path, chunk): scans a Kineto JSON file's events while it is written.",
    .tp_new = follower_new,
    .tp_methods = FOLLOWER_METHODS,
};
#endif /* HAVE_FOLLOWER */

/* ----------------------------------------------------------------------------------------- */

static PyMethodDef METHODS[] = {
    {"scan_trace", (PyCFunction)(void (*)(void))scan_trace, METH_VARARGS | METH_KEYWORDS,
     "scan_trace(data, *, release_pages=False) -> ((lo, hi, keys), columns) | None\n\n"
     "release_pages: as for scan_document.\n"
     "scan_document and scan_events of the whole traceEvents array in one pass. None when\n"
     "either would decline, or when there is no traceEvents."},
    {"scan_document", (PyCFunction)(void (*)(void))scan_document, METH_VARARGS | METH_KEYWORDS,
     "scan_document(data, *, release_pages=False) -> (lo, hi, keys) | None\n\n"
     "release_pages: data is a read-only map of a file the caller owns; the pages of the\n"
     "event list are unmapped behind the scan (they would all count in RSS until it closes).\n"
     "Validate a whole Kineto JSON document; locate the inside of its traceEvents array and\n"
     "the raw value span of every other top-level key. None when the text is outside the\n"
     "well-formed subset we handle."},
    {"scan_events", (PyCFunction)(void (*)(void))scan_events, METH_VARARGS | METH_KEYWORDS,
     "scan_events(data, lo, hi, *, release_pages=False) -> dict | None\n\n"
     "release_pages: as for scan_document, for data[lo:hi].\n"
     "Scan the comma-separated event objects in data[lo:hi] into column buffers.\n"
     "None when anything is outside the subset we model exactly (msgspec handles it)."},
    {"value_end", value_end, METH_VARARGS,
     "value_end(data, at) -> int\n\n"
     "Where the JSON value starting at data[at] ends (ValueError when there is none)."},
    {"nest", nest, METH_VARARGS,
     "nest(order, start, end, pid, tid) -> (parent, depth, covered)\n\n"
     "The host call tree in one pass: int64 arrays in, int64 buffers out (see _scan.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT,
    "_scan",
    "Kineto trace JSON scanned straight into typed column buffers (see _scan.c).",
    -1,
    METHODS,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void)
{
    init_classes();
    index_keys(&EVENT_INDEX, N_EVENT_KEYS);
    index_keys(&ARGS_INDEX, N_ARGS_KEYS);
    if (PyType_Ready(&BlockType) < 0)
        return NULL;
    PyObject *mmap_module = PyImport_ImportModule("mmap");
    if (mmap_module) {
        MMAP_TYPE = PyObject_GetAttrString(mmap_module, "mmap");
        Py_DECREF(mmap_module);
    }
    if (!MMAP_TYPE)
        return NULL;
    PyObject *module = PyModule_Create(&MODULE);
    if (module && PyModule_AddObjectRef(module, "Block", (PyObject *)&BlockType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
#if HAVE_FOLLOWER
    if (module && (PyType_Ready(&FollowerType) < 0 ||
                   PyModule_AddObjectRef(module, "Follower", (PyObject *)&FollowerType) < 0)) {
        Py_DECREF(module);
        return NULL;
    }
#endif
    return module;
}
