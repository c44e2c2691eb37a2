/* One-pass decoder of XLine event runs and XEvent/XStat fields, the native twin of the
 * numpy path in profscope/formats/xplane_wire.py (event_run_part, decode_events,
 * _decode_stats, walk). Its results are those of that path, array for array.
 *
 * Field numbers (protos/xplane.proto, upstream tsl/profiler/protobuf/xplane.proto):
 *   XLine:  events = 4 (LEN; tag byte 0x22), a run of consecutive entries.
 *   XEvent: metadata_id = 1, offset_ps = 2 | num_occurrences = 5 (oneof data: the last one
 *           set wins, offset_ps reads 0 when the other is set), duration_ps = 3, stats = 4.
 *   XStat:  metadata_id = 1; oneof value: double_value = 2 (fixed64), uint64_value = 3,
 *           int64_value = 4, str_value = 5 (LEN), bytes_value = 6 (LEN), ref_value = 7.
 * Protobuf's rules: fields in any order, the last occurrence wins, unknown fields (any
 * number, wire types 0/1/2/5) skipped, varints up to 10 bytes (the value modulo 2^64),
 * wire types 3/4/6/7 and field number 0 are errors, a field past its message's end is
 * truncation. Every read is bounded by the buffer; any error raises ValueError (the
 * callers' xspace_errors turns it into BadInput naming the file). Nothing is allocated
 * from a size read from the file: output grows with the entries actually present.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { OK = 0, E_TRUNC, E_LONGVARINT, E_FIELD0, E_WIRETYPE, E_LENGTH, E_ORDINAL, E_RANGE, E_NOMEM, E_RAISED };

static const char *const ERRORS[] = {
    "", "truncated: a field runs past its message", "varint longer than 10 bytes", "field number 0",
    "unsupported wire type", "length out of range", "an event with more than 32767 fields",
    "event range outside the buffer", "out of memory", "",
};

static PyObject *Truncated;  /* profscope.formats.protowire.Truncated, set by the caller */

static PyObject *raise_err(int e)
{
    if (e == E_NOMEM)
        return PyErr_NoMemory();
    if (e == E_RAISED)  /* a Python callback's own exception, already set */
        return NULL;
    if (e == E_TRUNC && Truncated != NULL)
        PyErr_SetString(Truncated, ERRORS[e]);
    else
        PyErr_SetString(PyExc_ValueError, ERRORS[e]);
    return NULL;
}

/* A varint at *pos (bounded by n, the buffer's length). */
static inline int rd_varint(const uint8_t *b, Py_ssize_t n, Py_ssize_t *pos, uint64_t *out)
{
    Py_ssize_t p = *pos;
    if (p < n && b[p] < 0x80) {
        *out = b[p];
        *pos = p + 1;
        return OK;
    }
    uint64_t v = 0;
    int shift = 0;
    for (;;) {
        if (p >= n)
            return E_TRUNC;
        uint8_t c = b[p++];
        v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            *out = v;
            *pos = p;
            return OK;
        }
        shift += 7;
        if (shift > 63)
            return E_LONGVARINT;
    }
}

static inline uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* One field at pos of a message ending at stop (<= n): its number, wire type, value (the
 * varint, the fixed64 bits, or a LEN payload's start), LEN end and the next position. */
typedef struct {
    uint64_t number;
    int wt;
    uint64_t value;
    Py_ssize_t fend;
    Py_ssize_t nxt;
} Field;

static inline int rd_field(const uint8_t *b, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t stop, Field *f)
{
    uint64_t tag, ln;
    int r = rd_varint(b, n, &pos, &tag);
    if (r)
        return r;
    f->number = tag >> 3;
    f->wt = (int)(tag & 7);
    f->value = 0;
    f->fend = 0;
    if (f->number == 0)
        return E_FIELD0;
    switch (f->wt) {
    case 0:
        r = rd_varint(b, n, &pos, &f->value);
        if (r)
            return r;
        f->nxt = pos;
        break;
    case 1:
        f->nxt = pos + 8;
        if (f->nxt > stop)
            return E_TRUNC;
        f->value = le64(b + pos);
        break;
    case 2:
        r = rd_varint(b, n, &pos, &ln);
        if (r)
            return r;
        if (ln > ((uint64_t)1 << 40))
            return E_LENGTH;
        f->value = (uint64_t)pos;
        f->fend = f->nxt = pos + (Py_ssize_t)ln;
        break;
    case 5:
        f->nxt = pos + 4;
        break;
    default:
        return E_WIRETYPE;
    }
    return f->nxt > stop ? E_TRUNC : OK;
}

/* ----------------------------------------------------------------------------------
 * Runs of XLine.events
 * ---------------------------------------------------------------------------------- */

/* How many entries of a run from pos end by stop (<= end), and where they end:
 * xplane_wire.event_run_part's sequential walk, counting only. */
static int walk_run(const uint8_t *b, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t stop,
                    Py_ssize_t *count, Py_ssize_t *after)
{
    Py_ssize_t cur = pos, k = 0;
    Field f;
    while (cur < stop && b[cur] == 0x22) {
        int r = rd_field(b, n, cur, end, &f);
        if (r)
            return r;
        if (f.nxt > stop && stop != end)
            break;
        k++;
        cur = f.nxt;
    }
    *count = k;
    *after = cur;
    return OK;
}

static PyObject *copy_array(const void *src, Py_ssize_t n, int type, size_t item)
{
    npy_intp dims[1] = {n};
    PyObject *a = PyArray_SimpleNew(1, dims, type);
    if (a != NULL && n)
        memcpy(PyArray_DATA((PyArrayObject *)a), src, (size_t)n * item);
    return a;
}

static int get_buf(PyObject *obj, Py_buffer *view)
{
    return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE);
}

static int check_span(Py_ssize_t n, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t stop)
{
    if (pos < 0 || end > n || stop > end || pos > stop) {
        PyErr_SetString(PyExc_ValueError, "run bounds outside the buffer");
        return -1;
    }
    return 0;
}

/* event_run(buf, pos, end, stop, max_n) -> (starts int64, ends int64, position after):
 * one walk, into arrays grown as entries are found (an entry takes at least 4 bytes, so
 * the first guess is a quarter of what the walk may read, at most 1 M entries) */
static PyObject *py_event_run(PyObject *self, PyObject *args)
{
    PyObject *obj;
    Py_ssize_t pos, end, stop, max_n;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "Onnnn", &obj, &pos, &end, &stop, &max_n))
        return NULL;
    if (get_buf(obj, &view) < 0)
        return NULL;
    const uint8_t *b = view.buf;
    PyObject *s = NULL, *e = NULL, *out = NULL;
    int64_t *starts = NULL, *ends = NULL;
    Py_ssize_t k = 0, cur = pos;
    int r = OK;
    if (check_span(view.len, pos, end, stop) < 0)
        goto done;
    Py_ssize_t cap = (stop - pos) / 4 + 1;
    if (cap > (1 << 20))
        cap = 1 << 20;
    starts = malloc(cap * sizeof(int64_t));
    ends = malloc(cap * sizeof(int64_t));
    if (!starts || !ends) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    Field f;
    while (k < max_n && cur < stop && b[cur] == 0x22) {
        r = rd_field(b, view.len, cur, end, &f);
        if (r)
            break;
        if (f.nxt > stop && stop != end)
            break;
        if (k == cap) {
            Py_ssize_t ncap = 2 * cap;
            int64_t *a1 = realloc(starts, ncap * sizeof(int64_t));
            if (a1) starts = a1;
            int64_t *a2 = a1 ? realloc(ends, ncap * sizeof(int64_t)) : NULL;
            if (a2) ends = a2;
            if (!a1 || !a2) { r = E_NOMEM; break; }
            cap = ncap;
        }
        starts[k] = (int64_t)f.value;
        ends[k] = (int64_t)f.nxt;
        k++;
        cur = f.nxt;
    }
    Py_END_ALLOW_THREADS
    if (r) {
        raise_err(r);
        goto done;
    }
    s = copy_array(starts, k, NPY_INT64, 8);
    e = copy_array(ends, k, NPY_INT64, 8);
    if (s && e)
        out = Py_BuildValue("OOn", s, e, cur);
done:
    free(starts);
    free(ends);
    Py_XDECREF(s);
    Py_XDECREF(e);
    PyBuffer_Release(&view);
    return out;
}

/* event_run_into(buf, pos, end, starts, ends, at) -> (count, position after): the run's
 * entries (as event_run gives them) written into the caller's int64 arrays from index at;
 * a plane's events go into arrays sized once from run_count, not into one array per
 * run concatenated afterwards (xplane_wire.plane_events). */
static int64_t *i64_arg(PyObject *o, Py_ssize_t n, int writable, const char *what);

static PyObject *py_event_run_into(PyObject *self, PyObject *args)
{
    PyObject *obj, *o_s, *o_e;
    Py_ssize_t pos, end, at;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "OnnOOn", &obj, &pos, &end, &o_s, &o_e, &at))
        return NULL;
    Py_ssize_t cap = PyArray_Check(o_s) ? PyArray_SIZE((PyArrayObject *)o_s) : 0;
    int64_t *starts = i64_arg(o_s, cap, 1, "starts");
    int64_t *ends = starts ? i64_arg(o_e, cap, 1, "ends") : NULL;
    if (ends == NULL)
        return NULL;
    if (at < 0 || at > cap) {
        PyErr_SetString(PyExc_ValueError, "event_run_into: start index out of range");
        return NULL;
    }
    if (get_buf(obj, &view) < 0)
        return NULL;
    if (check_span(view.len, pos, end, end) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const uint8_t *b = view.buf;
    Py_ssize_t k = at, cur = pos;
    int r = OK, full = 0;
    Py_BEGIN_ALLOW_THREADS
    Field f;
    while (cur < end && b[cur] == 0x22) {
        r = rd_field(b, view.len, cur, end, &f);
        if (r)
            break;
        if (k == cap) {
            full = 1;
            break;
        }
        starts[k] = (int64_t)f.value;
        ends[k] = (int64_t)f.nxt;
        k++;
        cur = f.nxt;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (r)
        return raise_err(r);
    if (full) {
        PyErr_SetString(PyExc_ValueError, "event_run_into: more entries than the arrays hold");
        return NULL;
    }
    return Py_BuildValue("nn", k - at, cur);
}

/* run_count(buf, pos, end[, stop]) -> (events in the whole run, position after); with
 * stop (pos <= stop <= end): only the entries that end by stop, and where they end (the
 * caller walks a huge run a window at a time, letting a mapped buffer's pages go between) */
static PyObject *py_run_count(PyObject *self, PyObject *args)
{
    PyObject *obj;
    Py_ssize_t pos, end, stop = -1, count, after;
    Py_buffer view;
    int r;
    if (!PyArg_ParseTuple(args, "Onn|n", &obj, &pos, &end, &stop))
        return NULL;
    if (stop < 0)
        stop = end;
    if (get_buf(obj, &view) < 0)
        return NULL;
    if (check_span(view.len, pos, end, stop) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    r = walk_run(view.buf, view.len, pos, end, stop, &count, &after);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (r)
        return raise_err(r);
    return Py_BuildValue("nn", count, after);
}

/* ----------------------------------------------------------------------------------
 * Events and their stats
 * ---------------------------------------------------------------------------------- */

typedef struct {
    int32_t ev;
    int16_t ord;
    int8_t kcase;
    uint8_t kind;
    uint64_t value;
    int64_t send;
} Rec;

typedef struct {  /* a growable array of the stats of one kind */
    int32_t *ev;
    int16_t *ord;
    int8_t *kcase;
    uint64_t *value;
    int64_t *send;
    Py_ssize_t n, cap;
} KindOut;

static int kind_push(KindOut *k, const Rec *r)
{
    if (k->n == k->cap) {
        Py_ssize_t cap = k->cap ? 2 * k->cap : 256;
        void *a = realloc(k->ev, cap * sizeof(int32_t));
        if (!a) return E_NOMEM;
        k->ev = a;
        a = realloc(k->ord, cap * sizeof(int16_t));
        if (!a) return E_NOMEM;
        k->ord = a;
        a = realloc(k->kcase, cap * sizeof(int8_t));
        if (!a) return E_NOMEM;
        k->kcase = a;
        a = realloc(k->value, cap * sizeof(uint64_t));
        if (!a) return E_NOMEM;
        k->value = a;
        a = realloc(k->send, cap * sizeof(int64_t));
        if (!a) return E_NOMEM;
        k->send = a;
        k->cap = cap;
    }
    k->ev[k->n] = r->ev;
    k->ord[k->n] = r->ord;
    k->kcase[k->n] = r->kcase;
    k->value[k->n] = r->value;
    k->send[k->n] = r->send;
    k->n++;
    return OK;
}

#define LUT_MAX (1 << 20)  /* stat metadata ids below this are looked up in a table */

typedef struct {
    const uint8_t *b;
    Py_ssize_t n;
    const int64_t *starts, *ends;  /* each event's bytes; or, with run_count, each run's */
    const int64_t *run_count;      /* NULL: starts/ends are events; else runs of events */
    Py_ssize_t nruns;
    Py_ssize_t nev, chunk;
    const int64_t *kmids;  /* sorted */
    const int16_t *kvals;
    Py_ssize_t nk;
    int nkinds;            /* largest kind */
    uint8_t *lut;          /* NULL: binary search */
    Py_ssize_t lut_n;
    int64_t *mid, *off, *dur;
    KindOut *kinds;        /* [nkinds + 1] */
    Rec *scratch, *sorted;
    Py_ssize_t scap;
    Py_ssize_t *counts;
    Py_ssize_t ccap;
    PyObject *between;     /* NULL, or called (the GIL taken back) after each chunk decoded */
    PyThreadState *ts;     /* the thread's state while decode runs without the GIL */
} Dec;

static inline int kind_of(const Dec *d, int64_t mid)
{
    if (d->lut != NULL)
        return (mid >= 0 && mid < d->lut_n) ? d->lut[mid] : 0;
    Py_ssize_t lo = 0, hi = d->nk;
    while (lo < hi) {
        Py_ssize_t m = (lo + hi) / 2;
        if (d->kmids[m] < mid) lo = m + 1; else hi = m;
    }
    return (lo < d->nk && d->kmids[lo] == mid) ? d->kvals[lo] : 0;
}

/* One XStat [pos, stop): metadata_id and the last value field (case, bits, LEN end). */
static inline int dec_stat(const uint8_t *b, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t stop,
                           int64_t *mid, int *kcase, uint64_t *value, int64_t *send)
{
    Field f;
    *mid = 0;
    *kcase = 0;
    *value = 0;
    *send = 0;
    while (pos < stop) {
        int r = rd_field(b, n, pos, stop, &f);
        if (r)
            return r;
        if (f.wt == 0 && f.number == 1) {
            *mid = (int64_t)f.value;
        } else if ((f.wt == 0 && (f.number == 3 || f.number == 4 || f.number == 7)) ||
                   (f.wt == 1 && f.number == 2) || (f.wt == 2 && (f.number == 5 || f.number == 6))) {
            *kcase = (int)f.number;
            *value = f.value;
            *send = (int64_t)f.fend;
        }
        pos = f.nxt;
    }
    return OK;
}

static int push_scratch(Dec *d, Py_ssize_t *ns, const Rec *r)
{
    if (*ns == d->scap) {
        Py_ssize_t cap = d->scap ? 2 * d->scap : 4096;
        Rec *a = realloc(d->scratch, cap * sizeof(Rec));
        if (!a) return E_NOMEM;
        d->scratch = a;
        a = realloc(d->sorted, cap * sizeof(Rec));
        if (!a) return E_NOMEM;
        d->sorted = a;
        d->scap = cap;
    }
    d->scratch[(*ns)++] = *r;
    return OK;
}

/* The numpy path lays out a chunk's stats by field position, then event, and groups them
 * by kind with a stable sort: so within a chunk (kind, ordinal, event) order. The scratch
 * is in (event, ordinal) order; a stable counting sort on (kind, ordinal) gives that. */
static int flush_chunk(Dec *d, Py_ssize_t ns, int maxord)
{
    if (!ns)
        return OK;
    Py_ssize_t width = (Py_ssize_t)maxord + 1, nkeys = (Py_ssize_t)(d->nkinds + 1) * width;
    if (nkeys + 1 > d->ccap) {
        Py_ssize_t *a = realloc(d->counts, (nkeys + 1) * sizeof(Py_ssize_t));
        if (!a) return E_NOMEM;
        d->counts = a;
        d->ccap = nkeys + 1;
    }
    Py_ssize_t *c = d->counts;
    memset(c, 0, (nkeys + 1) * sizeof(Py_ssize_t));
    for (Py_ssize_t i = 0; i < ns; i++)
        c[d->scratch[i].kind * width + d->scratch[i].ord + 1]++;
    for (Py_ssize_t k = 1; k <= nkeys; k++)
        c[k] += c[k - 1];
    for (Py_ssize_t i = 0; i < ns; i++) {
        const Rec *r = &d->scratch[i];
        d->sorted[c[r->kind * width + r->ord]++] = *r;
    }
    for (Py_ssize_t i = 0; i < ns; i++) {
        int e = kind_push(&d->kinds[d->sorted[i].kind], &d->sorted[i]);
        if (e) return e;
    }
    return OK;
}

static int decode(Dec *d)
{
    const uint8_t *b = d->b;
    Py_ssize_t n = d->n;
    Field f;
    Py_ssize_t rk = -1, left = 0, cur = 0;  /* runs: the run, its events left, the next one */
    for (Py_ssize_t lo = 0; lo < d->nev; lo += d->chunk) {
        Py_ssize_t hi = lo + d->chunk < d->nev ? lo + d->chunk : d->nev;
        Py_ssize_t ns = 0;
        int maxord = 0;
        for (Py_ssize_t i = lo; i < hi; i++) {
            Py_ssize_t pos, stop;
            if (d->run_count != NULL) {  /* the next entry of the run (run_count counted them) */
                while (left == 0) {
                    if (++rk >= d->nruns)
                        return E_RANGE;
                    cur = d->starts[rk];
                    left = d->run_count[rk];
                }
                if (cur < 0 || cur >= n || b[cur] != 0x22)
                    return E_RANGE;
                int r = rd_field(b, n, cur, d->ends[rk], &f);
                if (r)
                    return r;
                pos = (Py_ssize_t)f.value;
                stop = f.fend;
                cur = f.nxt;
                left--;
            } else {
                pos = d->starts[i];
                stop = d->ends[i];
            }
            if (pos < 0 || stop > n)
                return E_RANGE;
            int64_t mid = 0, off = 0, dur = 0;
            int data_case = 0, ordinal = 0;
            for (; pos < stop; ordinal++) {
                int r = rd_field(b, n, pos, stop, &f);
                if (r)
                    return r;
                if (f.wt == 0) {
                    switch (f.number) {
                    case 1: mid = (int64_t)f.value; break;
                    case 2: off = (int64_t)f.value; data_case = 2; break;
                    case 3: dur = (int64_t)f.value; break;
                    case 5: data_case = 5; break;
                    }
                } else if (f.wt == 2 && f.number == 4) {  /* XEvent.stats */
                    if (ordinal > 32767)
                        return E_ORDINAL;
                    Rec rec;
                    int64_t smid;
                    int kcase;
                    r = dec_stat(b, n, (Py_ssize_t)f.value, f.fend, &smid, &kcase, &rec.value, &rec.send);
                    if (r)
                        return r;
                    int kind = d->nk ? kind_of(d, smid) : 0;
                    if (kind > 0) {
                        rec.ev = (int32_t)i;
                        rec.ord = (int16_t)ordinal;
                        rec.kcase = (int8_t)kcase;
                        rec.kind = (uint8_t)kind;
                        if (ordinal > maxord)
                            maxord = ordinal;
                        r = push_scratch(d, &ns, &rec);
                        if (r)
                            return r;
                    }
                }
                pos = f.nxt;
            }
            d->mid[i] = mid;
            d->off[i] = data_case == 2 ? off : 0;
            d->dur[i] = dur;
        }
        int r = flush_chunk(d, ns, maxord);
        if (r)
            return r;
        if (d->between != NULL && hi < d->nev) {
            /* the caller's hook between chunks: a mapped plane's pages behind the decode let
             * go (formats/xplane_wire.py decode_plane's ``between``) */
            PyEval_RestoreThread(d->ts);
            PyObject *res = PyObject_CallNoArgs(d->between);
            Py_XDECREF(res);
            d->ts = PyEval_SaveThread();
            if (res == NULL)
                return E_RAISED;
        }
    }
    return OK;
}


#define NPY_TRACE_DOMAIN_ 389047  /* numpy's tracemalloc domain for array data */

static void free_capsule(PyObject *cap)
{
    void *p = PyCapsule_GetPointer(cap, NULL);
    PyTraceMalloc_Untrack(NPY_TRACE_DOMAIN_, (uintptr_t)p);
    free(p);
}

/* A 1-d array over *pp's first n items that owns the buffer (shrunk to n; freed with the
 * array): *pp is set to NULL once the array owns it, so that the caller frees it only
 * where this failed first. */
static PyObject *own_array(void **pp, Py_ssize_t n, int type, size_t item)
{
    npy_intp dims[1] = {n};
    if (n == 0 || *pp == NULL)
        return PyArray_SimpleNew(1, dims, type);
    void *p = realloc(*pp, (size_t)n * item);
    if (p != NULL)
        *pp = p;
    PyObject *a = PyArray_SimpleNewFromData(1, dims, type, *pp);
    if (a == NULL)
        return NULL;
    PyObject *cap = PyCapsule_New(*pp, NULL, free_capsule);
    if (cap == NULL) {
        Py_DECREF(a);
        return NULL;
    }
    *pp = NULL;  /* the capsule owns it from here, even where the next call fails */
    /* seen by tracemalloc as numpy's own array data is (the copies these replace were) */
    PyTraceMalloc_Track(NPY_TRACE_DOMAIN_, (uintptr_t)PyCapsule_GetPointer(cap, NULL), (size_t)n * item);
    if (PyArray_SetBaseObject((PyArrayObject *)a, cap) < 0) {
        Py_DECREF(a);
        return NULL;
    }
    return a;
}

/* decode_events(buf, starts int64, ends int64, kmids int64 sorted, kvals int16, chunk)
 * -> (metadata_id, offset_ps, duration_ps, {kind: (event, ordinal, case, value, str_end)}) */
static PyObject *py_decode_events(PyObject *self, PyObject *args)
{
    PyObject *obj, *o_s, *o_e, *o_km, *o_kv, *o_rc = NULL, *o_between = NULL;
    Py_ssize_t chunk;
    if (!PyArg_ParseTuple(args, "OOOOOn|OO", &obj, &o_s, &o_e, &o_km, &o_kv, &chunk, &o_rc, &o_between))
        return NULL;
    if (o_between != NULL && o_between != Py_None && !PyCallable_Check(o_between)) {
        PyErr_SetString(PyExc_TypeError, "between: a callable or None");
        return NULL;
    }
    if (chunk < 1)
        chunk = 1;
    Py_buffer view;
    if (get_buf(obj, &view) < 0)
        return NULL;
    PyArrayObject *a_s = NULL, *a_e = NULL, *a_km = NULL, *a_kv = NULL, *a_rc = NULL;
    PyObject *mid = NULL, *off = NULL, *dur = NULL, *kinds = NULL, *out = NULL;
    Dec d;
    memset(&d, 0, sizeof d);
    int r = OK;
    a_s = (PyArrayObject *)PyArray_FROMANY(o_s, NPY_INT64, 1, 1, NPY_ARRAY_CARRAY_RO);
    a_e = (PyArrayObject *)PyArray_FROMANY(o_e, NPY_INT64, 1, 1, NPY_ARRAY_CARRAY_RO);
    a_km = (PyArrayObject *)PyArray_FROMANY(o_km, NPY_INT64, 1, 1, NPY_ARRAY_CARRAY_RO);
    a_kv = (PyArrayObject *)PyArray_FROMANY(o_kv, NPY_INT16, 1, 1, NPY_ARRAY_CARRAY_RO);
    if (!a_s || !a_e || !a_km || !a_kv)
        goto done;
    if (PyArray_SIZE(a_s) != PyArray_SIZE(a_e) || PyArray_SIZE(a_km) != PyArray_SIZE(a_kv)) {
        PyErr_SetString(PyExc_ValueError, "column lengths differ");
        goto done;
    }
    d.b = view.buf;
    d.n = view.len;
    d.starts = PyArray_DATA(a_s);
    d.ends = PyArray_DATA(a_e);
    d.nev = PyArray_SIZE(a_s);
    if (o_rc != NULL && o_rc != Py_None) {
        /* runs of XLine.events entries (pos, end of their line, count): the events are
         * read from the runs as decode goes, with no byte-range array per event */
        a_rc = (PyArrayObject *)PyArray_FROMANY(o_rc, NPY_INT64, 1, 1, NPY_ARRAY_CARRAY_RO);
        if (!a_rc)
            goto done;
        if (PyArray_SIZE(a_rc) != PyArray_SIZE(a_s)) {
            PyErr_SetString(PyExc_ValueError, "column lengths differ");
            goto done;
        }
        d.run_count = PyArray_DATA(a_rc);
        d.nruns = PyArray_SIZE(a_rc);
        d.nev = 0;
        for (Py_ssize_t k = 0; k < d.nruns; k++) {
            if (d.run_count[k] < 0 || d.starts[k] < 0 || d.ends[k] > view.len || d.starts[k] > d.ends[k]) {
                PyErr_SetString(PyExc_ValueError, "run bounds outside the buffer");
                goto done;
            }
            d.nev += d.run_count[k];
            if (d.nev >= ((Py_ssize_t)1 << 31))
                break;
        }
    }
    if (d.nev >= ((Py_ssize_t)1 << 31)) {
        PyErr_SetString(PyExc_ValueError, "too many events for one call");
        goto done;
    }
    d.chunk = chunk;
    d.kmids = PyArray_DATA(a_km);
    d.kvals = PyArray_DATA(a_kv);
    d.nk = PyArray_SIZE(a_km);
    d.nkinds = 0;
    int64_t maxmid = -1;
    int lut_ok = 1;
    for (Py_ssize_t i = 0; i < d.nk; i++) {
        if (d.kvals[i] < 1 || d.kvals[i] > 255) {
            PyErr_SetString(PyExc_ValueError, "stat kinds must be 1..255");
            goto done;
        }
        if (d.kvals[i] > d.nkinds) d.nkinds = d.kvals[i];
        if (d.kmids[i] < 0 || d.kmids[i] >= LUT_MAX) lut_ok = 0;
        else if (d.kmids[i] > maxmid) maxmid = d.kmids[i];
    }
    if (lut_ok && d.nk) {
        d.lut_n = (Py_ssize_t)maxmid + 1;
        d.lut = calloc((size_t)d.lut_n, 1);
        if (!d.lut) { PyErr_NoMemory(); goto done; }
        for (Py_ssize_t i = 0; i < d.nk; i++)
            d.lut[d.kmids[i]] = (uint8_t)d.kvals[i];
    }
    d.kinds = calloc((size_t)d.nkinds + 1, sizeof(KindOut));
    if (!d.kinds) { PyErr_NoMemory(); goto done; }
    npy_intp dims[1] = {d.nev};
    mid = PyArray_SimpleNew(1, dims, NPY_INT64);
    off = PyArray_SimpleNew(1, dims, NPY_INT64);
    dur = PyArray_SimpleNew(1, dims, NPY_INT64);
    if (!mid || !off || !dur)
        goto done;
    d.mid = PyArray_DATA((PyArrayObject *)mid);
    d.off = PyArray_DATA((PyArrayObject *)off);
    d.dur = PyArray_DATA((PyArrayObject *)dur);
    d.between = o_between != Py_None ? o_between : NULL;
    d.ts = PyEval_SaveThread();
    r = decode(&d);
    PyEval_RestoreThread(d.ts);
    if (r) {
        raise_err(r);
        goto done;
    }
    kinds = PyDict_New();
    if (!kinds)
        goto done;
    for (int k = 1; k <= d.nkinds; k++) {
        KindOut *ko = &d.kinds[k];
        if (!ko->n)
            continue;
        /* str_end: the LEN ends of str/bytes values, or empty when the kind has none */
        Py_ssize_t n_str = 0;
        for (Py_ssize_t i = 0; i < ko->n; i++) {
            if (ko->kcase[i] == 5 || ko->kcase[i] == 6)
                n_str++;
            else
                ko->send[i] = 0;
        }
        PyObject *t;
        /* the grown buffers become the arrays (no copy: a second time the stats' memory) */
        t = Py_BuildValue("(NNNNN)", own_array((void **)&ko->ev, ko->n, NPY_INT32, 4),
                          own_array((void **)&ko->ord, ko->n, NPY_INT16, 2),
                          own_array((void **)&ko->kcase, ko->n, NPY_INT8, 1),
                          own_array((void **)&ko->value, ko->n, NPY_UINT64, 8),
                          n_str ? own_array((void **)&ko->send, ko->n, NPY_INT64, 8)
                                : copy_array(NULL, 0, NPY_INT64, 8));
        if (!t)
            goto done;
        PyObject *key = PyLong_FromLong(k);
        int bad = !key || PyDict_SetItem(kinds, key, t) < 0;
        Py_XDECREF(key);
        Py_DECREF(t);
        if (bad)
            goto done;
    }
    out = Py_BuildValue("OOOO", mid, off, dur, kinds);
done:
    Py_XDECREF(a_s);
    Py_XDECREF(a_e);
    Py_XDECREF(a_rc);
    Py_XDECREF(a_km);
    Py_XDECREF(a_kv);
    Py_XDECREF(mid);
    Py_XDECREF(off);
    Py_XDECREF(dur);
    Py_XDECREF(kinds);
    if (d.kinds) {
        for (int k = 0; k <= d.nkinds; k++) {
            free(d.kinds[k].ev);
            free(d.kinds[k].ord);
            free(d.kinds[k].kcase);
            free(d.kinds[k].value);
            free(d.kinds[k].send);
        }
        free(d.kinds);
    }
    free(d.lut);
    free(d.scratch);
    free(d.sorted);
    free(d.counts);
    PyBuffer_Release(&view);
    return out;
}

/* ---- XProf's step grouping (profscope/formats/xplane_steps.py): the two walks over
 * every event of a host plane, which in Python took most of a CPU profile's steps ---- */

/* An int64, C-contiguous array (writable when asked) of at least n items, or an error:
 * these are the caller's own arrays, written in place, never a converted copy. */
static int64_t *i64_arg(PyObject *o, Py_ssize_t n, int writable, const char *what)
{
    if (!PyArray_Check(o) || PyArray_TYPE((PyArrayObject *)o) != NPY_INT64 || PyArray_NDIM((PyArrayObject *)o) != 1
        || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)o) || PyArray_SIZE((PyArrayObject *)o) < n
        || (writable && !PyArray_ISWRITEABLE((PyArrayObject *)o))) {
        PyErr_Format(PyExc_TypeError, "%s: a 1-d C-contiguous%s int64 array of at least %zd items", what,
                     writable ? " writable" : "", n);
        return NULL;
    }
    return PyArray_DATA((PyArrayObject *)o);
}

/* nest_sequence(ids, ts, end, is_async, nest_parent, below): ConnectIntraThread's stack
 * walk over one line's nodes (ids, in line order); ts/end/is_async (bool) are indexed by
 * node id; nest_parent[i] is set where a node nests in the open one, below[i] to the node
 * under it on the stack (-1: none; below None: not recorded), as
 * xplane_steps.Grouping._nest_sequence does. */
static PyObject *py_nest_sequence(PyObject *self, PyObject *args)
{
    PyObject *o_ids, *o_ts, *o_end, *o_asy, *o_par, *o_below;
    if (!PyArg_ParseTuple(args, "OOOOOO", &o_ids, &o_ts, &o_end, &o_asy, &o_par, &o_below))
        return NULL;
    if (!PyArray_Check(o_ts)) {
        PyErr_SetString(PyExc_TypeError, "ts: an int64 array");
        return NULL;
    }
    Py_ssize_t total = PyArray_SIZE((PyArrayObject *)o_ts);
    Py_ssize_t n = PyArray_Check(o_ids) ? PyArray_SIZE((PyArrayObject *)o_ids) : 0;
    const int64_t *ids = i64_arg(o_ids, 0, 0, "ids");
    const int64_t *ts = ids ? i64_arg(o_ts, total, 0, "ts") : NULL;
    const int64_t *end = ts ? i64_arg(o_end, total, 0, "end") : NULL;
    int64_t *par = end ? i64_arg(o_par, total, 1, "nest_parent") : NULL;
    if (par == NULL)
        return NULL;
    int64_t *below = NULL;  /* None: not asked (a line without allocator events) */
    if (o_below != Py_None && (below = i64_arg(o_below, total, 1, "below")) == NULL)
        return NULL;
    if (!PyArray_Check(o_asy) || PyArray_TYPE((PyArrayObject *)o_asy) != NPY_BOOL
        || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)o_asy) || PyArray_SIZE((PyArrayObject *)o_asy) < total) {
        PyErr_SetString(PyExc_TypeError, "is_async: a C-contiguous bool array as long as ts");
        return NULL;
    }
    const npy_bool *asy = PyArray_DATA((PyArrayObject *)o_asy);
    for (Py_ssize_t k = 0; k < n; k++) {
        if (ids[k] < 0 || ids[k] >= total) {
            PyErr_SetString(PyExc_ValueError, "node id out of range");
            return NULL;
        }
    }
    int64_t *stack = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (stack == NULL)
        return PyErr_NoMemory();
    Py_ssize_t top = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t i = ids[k];
        if (asy[i])
            continue;
        int64_t b = ts[i], e = end[i];
        while (top) {
            int64_t s = stack[top - 1];
            if (ts[s] <= b && e <= end[s]) {
                par[i] = s;
                break;
            }
            top--;
        }
        if (below)
            below[i] = top ? stack[top - 1] : -1;
        stack[top++] = i;
    }
    free(stack);
    Py_RETURN_NONE;
}

/* One root's walk (ProcessRootEvent's PropagateGroupId, xplane_steps._group_from): every
 * node reachable from root, through the nesting edges (kids[kf[p]:kf[p+1]]) and the
 * others (xkids[xf[p]:...]), and through nodes no earlier root grouped, gets gid. A node
 * takes gid when the walk first reaches it (the same nodes as marking it seen then and
 * grouping it when taken from the queue: an ungrouped node reached is grouped either
 * way, and expanded once), so no seen-set is needed; *queue grows with the walk (a
 * step's events) and is kept for the next root. Returns an error message or NULL. */
static Py_ssize_t arr_len(PyObject *o);

typedef struct {
    int32_t *group;  /* int32: 4 bytes a node (13.5 M on the 308 MB profile), ids < 2^31 */
    Py_ssize_t total, nk, nx;
    const int64_t *kf, *kids, *xf, *xkids;
    const int32_t *xf32;  /* range_roots: xfirst as int32 (edges_csr's narrow), xf then NULL */
    int64_t *queue;
    Py_ssize_t cap;
} Walk;

static const char *walk_from(Walk *w, int64_t root, int64_t gid)
{
    if (w->group[root] >= 0)
        return NULL;
    Py_ssize_t head = 0, tail = 0;
    w->group[root] = (int32_t)gid;
    w->queue[tail++] = root;
    while (head < tail) {
        int64_t node = w->queue[head++];
        for (int pass = 0; pass < 2; pass++) {
            const int64_t *first = pass ? w->xf : w->kf, *adj = pass ? w->xkids : w->kids;
            Py_ssize_t n_adj = pass ? w->nx : w->nk;
            int64_t a = first[node], z = first[node + 1];
            if (a < 0 || z > n_adj || a > z)
                return "edge offsets out of range";
            for (int64_t j = a; j < z; j++) {
                int64_t c = adj[j];
                if (c < 0 || c >= w->total)
                    return "node id out of range";
                if (w->group[c] >= 0)
                    continue;
                w->group[c] = (int32_t)gid;
                if (tail == w->cap) {  /* each node once per walk: tail < total */
                    int64_t *q = realloc(w->queue, (size_t)w->cap * 2 * sizeof(int64_t));
                    if (q == NULL)
                        return "out of memory";
                    w->queue = q;
                    w->cap *= 2;
                }
                w->queue[tail++] = c;
            }
        }
    }
    return NULL;
}

/* The walk's group array: int32, C-contiguous, writable, under 2^31 nodes (its group ids
 * are below the node count); NULL and an error otherwise. */
static int32_t *group_arg(PyObject *o)
{
    if (!PyArray_Check(o) || PyArray_TYPE((PyArrayObject *)o) != NPY_INT32 || PyArray_NDIM((PyArrayObject *)o) != 1
        || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)o) || !PyArray_ISWRITEABLE((PyArrayObject *)o)
        || PyArray_SIZE((PyArrayObject *)o) >= ((npy_intp)1 << 31)) {
        PyErr_SetString(PyExc_TypeError, "group: a 1-d C-contiguous writable int32 array of under 2^31 nodes");
        return NULL;
    }
    return PyArray_DATA((PyArrayObject *)o);
}

/* The Walk over the arguments (group, kfirst, kids, xfirst, xkids), checked; 0 on error. */
static int walk_init(Walk *w, PyObject *o_group, PyObject *o_kf, PyObject *o_k, PyObject *o_xf, PyObject *o_xk)
{
    memset(w, 0, sizeof *w);
    if (!PyArray_Check(o_group) || !PyArray_Check(o_k) || !PyArray_Check(o_xk)) {
        PyErr_SetString(PyExc_TypeError, "group (int32), kids, xkids (int64): arrays");
        return 0;
    }
    w->total = PyArray_SIZE((PyArrayObject *)o_group);
    w->nk = PyArray_SIZE((PyArrayObject *)o_k);
    w->nx = PyArray_SIZE((PyArrayObject *)o_xk);
    w->group = group_arg(o_group);
    w->kf = w->group ? i64_arg(o_kf, w->total + 1, 0, "kfirst") : NULL;
    w->kids = w->kf ? i64_arg(o_k, w->nk, 0, "kids") : NULL;
    w->xf = w->kids ? i64_arg(o_xf, w->total + 1, 0, "xfirst") : NULL;
    w->xkids = w->xf ? i64_arg(o_xk, w->nx, 0, "xkids") : NULL;
    if (w->xkids == NULL)
        return 0;
    w->cap = 256;
    w->queue = malloc((size_t)w->cap * sizeof(int64_t));
    if (w->queue == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    return 1;
}

static PyObject *walk_error(Walk *w, const char *err)
{
    free(w->queue);
    if (err == NULL)
        Py_RETURN_NONE;
    if (strcmp(err, "out of memory") == 0)
        return PyErr_NoMemory();
    PyErr_SetString(PyExc_ValueError, err);
    return NULL;
}

/* group_from(root, gid, group, kfirst, kids, xfirst, xkids): one root's walk, in place. */
static PyObject *py_group_from(PyObject *self, PyObject *args)
{
    Py_ssize_t root;
    long long gid;
    PyObject *o_group, *o_kf, *o_k, *o_xf, *o_xk;
    Walk w;
    if (!PyArg_ParseTuple(args, "nLOOOOO", &root, &gid, &o_group, &o_kf, &o_k, &o_xf, &o_xk))
        return NULL;
    if (gid < 0 || gid > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "gid must be in [0, 2^31)");
        return NULL;
    }
    if (!walk_init(&w, o_group, o_kf, o_k, o_xf, o_xk))
        return NULL;
    if (root < 0 || root >= w.total)
        return walk_error(&w, "root out of range");
    return walk_error(&w, walk_from(&w, root, gid));
}

/* group_roots(roots, group, kfirst, kids, xfirst, xkids) -> the roots walked: each root
 * in turn that no earlier walk grouped gets the next group id (0, 1, ...) and its walk,
 * as xplane_steps.Grouping.run's loop over the sorted roots calls group_from. */
static PyObject *py_group_roots(PyObject *self, PyObject *args)
{
    PyObject *o_roots, *o_group, *o_kf, *o_k, *o_xf, *o_xk;
    Walk w;
    if (!PyArg_ParseTuple(args, "OOOOOO", &o_roots, &o_group, &o_kf, &o_k, &o_xf, &o_xk))
        return NULL;
    Py_ssize_t nr = arr_len(o_roots);
    const int64_t *roots = nr >= 0 ? i64_arg(o_roots, nr, 0, "roots") : NULL;
    if (roots == NULL || !walk_init(&w, o_group, o_kf, o_k, o_xf, o_xk))
        return NULL;
    for (Py_ssize_t k = 0; k < nr; k++)
        if (roots[k] < 0 || roots[k] >= w.total)
            return walk_error(&w, "root out of range");
    npy_intp d[1] = {nr};
    PyObject *a_out = PyArray_SimpleNew(1, d, NPY_INT64);
    if (a_out == NULL)
        return walk_error(&w, "out of memory");
    int64_t *out = PyArray_DATA((PyArrayObject *)a_out);
    Py_ssize_t m = 0;
    const char *err = NULL;
    for (Py_ssize_t k = 0; k < nr && err == NULL; k++) {
        if (w.group[roots[k]] >= 0)
            continue;
        err = walk_from(&w, roots[k], m);
        out[m++] = roots[k];
    }
    if (err != NULL) {
        Py_DECREF(a_out);
        return walk_error(&w, err);
    }
    free(w.queue);
    PyObject *res = PySequence_GetSlice(a_out, 0, m);
    Py_DECREF(a_out);
    return res;
}

/* nest_children(parent_of) -> (first, kids): the nesting edges (parent_of[i] >= 0: i's
 * parent) as a CSR, every parent's children in node order (kids[first[p]:first[p+1]]),
 * as xplane_steps._nesting_edges' stable argsort gives them; two passes, no sort and no
 * temporary over every node (the numpy path's touched 0.7 GB on the 308 MB profile). */
static PyObject *py_nest_children(PyObject *self, PyObject *o_par)
{
    Py_ssize_t total = PyArray_Check(o_par) ? PyArray_SIZE((PyArrayObject *)o_par) : 0;
    const int64_t *par = i64_arg(o_par, total, 0, "parent_of");
    if (par == NULL)
        return NULL;
    npy_intp df[1] = {total + 1};
    PyObject *a_first = PyArray_ZEROS(1, df, NPY_INT64, 0);
    if (a_first == NULL)
        return NULL;
    int64_t *first = PyArray_DATA((PyArrayObject *)a_first);
    for (Py_ssize_t i = 0; i < total; i++) {
        if (par[i] >= total) {
            Py_DECREF(a_first);
            PyErr_SetString(PyExc_ValueError, "nest_children: a parent out of range");
            return NULL;
        }
        if (par[i] >= 0)
            first[par[i] + 1]++;
    }
    for (Py_ssize_t i = 0; i < total; i++)
        first[i + 1] += first[i];
    npy_intp dk[1] = {(npy_intp)first[total]};
    PyObject *a_kids = PyArray_SimpleNew(1, dk, NPY_INT64);
    if (a_kids == NULL) {
        Py_DECREF(a_first);
        return NULL;
    }
    int64_t *kids = PyArray_DATA((PyArrayObject *)a_kids);
    /* first[p] serves as p's cursor (it ends at the old first[p + 1]), then all shift by one */
    for (Py_ssize_t i = 0; i < total; i++)
        if (par[i] >= 0)
            kids[first[par[i]]++] = i;
    if (total)
        memmove(first + 1, first, (size_t)total * sizeof(int64_t));
    first[0] = 0;
    return Py_BuildValue("NN", a_first, a_kids);
}

/* ---- XProf's host step database of a CPU-only profile (xplane_step_events._host_step_db,
 * whose numpy path is the twin under PROFSCOPE_NATIVE=0): three passes over the grouped
 * events, with one int32 index per kept event (the groups' CSR) as the only array over
 * the whole profile; the numpy path's dozen whole-profile temporaries were 3.4 GB of
 * fresh pages on the 308 MB profile. ---- */

typedef struct {
    int64_t s, e;
    int16_t kind;
} Span;

static int span_cmp(const void *a, const void *b)
{
    int64_t x = ((const Span *)a)->s, y = ((const Span *)b)->s;
    return (x > y) - (x < y);
}

/* A 1-d C-contiguous array of the given type and at least n items, or NULL (error set). */
static void *typed_arg(PyObject *o, int type, Py_ssize_t n, const char *what)
{
    if (!PyArray_Check(o) || PyArray_TYPE((PyArrayObject *)o) != type || PyArray_NDIM((PyArrayObject *)o) != 1
        || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)o) || PyArray_SIZE((PyArrayObject *)o) < n) {
        PyErr_Format(PyExc_TypeError, "%s: a 1-d C-contiguous array of the expected type, %zd items", what, n);
        return NULL;
    }
    return PyArray_DATA((PyArrayObject *)o);
}

static Py_ssize_t arr_len(PyObject *o)
{
    return PyArray_Check(o) ? PyArray_SIZE((PyArrayObject *)o) : -1;
}

/* An int32 or int64 array of n items (the walks' int32 group ids, a decode's int64
 * metadata ids, the gathered int32 ones): *p32 or *p64 set, the other NULL; 0 on error. */
static int i32_or_i64_arg(PyObject *o, Py_ssize_t n, const char *what, const int32_t **p32, const int64_t **p64)
{
    *p32 = NULL;
    *p64 = NULL;
    if (PyArray_Check(o) && PyArray_TYPE((PyArrayObject *)o) == NPY_INT32)
        *p32 = typed_arg(o, NPY_INT32, n, what);
    else
        *p64 = typed_arg(o, NPY_INT64, n, what);
    return *p32 != NULL || *p64 != NULL;
}

/* host_step_db(group i32|i64, line i32, off i64, dur i64, mid i32|i64, line_ps i64, line_key i32,
 *              mid_flags u8 (1: IsExplicitHostStepMarker, 2: IsRealCpuCompute), mid_kind i16,
 *              root_key i32, root_start i64, root_end i64, root_gid i64, root_idx i64, n_groups)
 * -> (first_ps, begin i64[G], dur i64[G], has_compute bool[G], present bool[G], levels i16[L],
 *     covers i64[L*G])
 * Per group g (0 <= group < n_groups; -1: ungrouped): its markers (explicit names and its
 * root events: an event at a root's (line key, start, end) whose gid it has, or an index
 * of root_idx) and the longest of them, the first of equal ones (StepTime); its other
 * IsRealCpuCompute events typed by mid_kind (ClassifyCpuEvent), clipped to the step;
 * covers[l * G + g]: the time the clipped events of type >= levels[l] cover (the union),
 * levels being every type any grouped event has (ToNonOverlappedEvents' priorities). */
/* event_times(line i32, offset i64, duration i64, line_ps i64, ts i64, end i64): each
 * event's absolute begin (its line's timestamp in ps + its offset) and end, written into
 * the caller's arrays (numpy's line_ps[line] * 1000 + offset made three temporaries as
 * large as the result). */
static PyObject *py_event_times(PyObject *self, PyObject *args)
{
    PyObject *o_line, *o_off, *o_dur, *o_lps, *o_ts, *o_end;
    if (!PyArg_ParseTuple(args, "OOOOOO", &o_line, &o_off, &o_dur, &o_lps, &o_ts, &o_end))
        return NULL;
    Py_ssize_t n = arr_len(o_line), nl = arr_len(o_lps);
    if (n < 0 || nl < 0) {
        PyErr_SetString(PyExc_TypeError, "event_times: arrays expected");
        return NULL;
    }
    const int32_t *line = typed_arg(o_line, NPY_INT32, n, "line");
    const int64_t *off = line ? i64_arg(o_off, n, 0, "offset") : NULL;
    const int64_t *dur = off ? i64_arg(o_dur, n, 0, "duration") : NULL;
    const int64_t *lps = dur ? i64_arg(o_lps, nl, 0, "line_ps") : NULL;
    int64_t *ts = lps ? i64_arg(o_ts, n, 1, "ts") : NULL;
    int64_t *end = ts ? i64_arg(o_end, n, 1, "end") : NULL;
    if (end == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (line[i] < 0 || line[i] >= nl) {
            PyErr_SetString(PyExc_ValueError, "event_times: a line out of range");
            return NULL;
        }
        ts[i] = lps[line[i]] + off[i];
        end[i] = ts[i] + dur[i];
    }
    Py_RETURN_NONE;
}

/* edges_csr(keys i64, values i64, total[, narrow]) -> (first, adj): key k's values, in the order
 * given, are adj[first[k]:first[k + 1]] (xplane_steps._csr's stable argsort, in two
 * passes; its bincount was one more array over every node). */
static PyObject *py_edges_csr(PyObject *self, PyObject *args)
{
    PyObject *o_k, *o_v;
    Py_ssize_t total;
    int narrow = 0;
    if (!PyArg_ParseTuple(args, "OOn|p", &o_k, &o_v, &total, &narrow))
        return NULL;
    Py_ssize_t m = arr_len(o_k);
    const int64_t *keys = m >= 0 ? i64_arg(o_k, m, 0, "keys") : NULL;
    const int64_t *vals = keys ? i64_arg(o_v, m, 0, "values") : NULL;
    if (vals == NULL || total < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "edges_csr: total < 0");
        return NULL;
    }
    for (Py_ssize_t j = 0; j < m; j++) {
        if (keys[j] < 0 || keys[j] >= total) {
            PyErr_SetString(PyExc_ValueError, "edges_csr: a key out of range");
            return NULL;
        }
    }
    npy_intp df[1] = {total + 1}, da[1] = {m};
    narrow = narrow && m < ((Py_ssize_t)1 << 31);
    PyObject *a_first = PyArray_ZEROS(1, df, narrow ? NPY_INT32 : NPY_INT64, 0);
    PyObject *a_adj = a_first ? PyArray_SimpleNew(1, da, NPY_INT64) : NULL;
    if (a_adj == NULL) {
        Py_XDECREF(a_first);
        return NULL;
    }
    int64_t *adj = PyArray_DATA((PyArrayObject *)a_adj);
    if (narrow) {  /* the same offsets as int32: they are below m < 2^31 */
        int32_t *first = PyArray_DATA((PyArrayObject *)a_first);
        for (Py_ssize_t j = 0; j < m; j++)
            first[keys[j] + 1]++;
        for (Py_ssize_t k = 0; k < total; k++)
            first[k + 1] += first[k];
        for (Py_ssize_t j = 0; j < m; j++)
            adj[first[keys[j]]++] = vals[j];
        if (total)
            memmove(first + 1, first, (size_t)total * sizeof(int32_t));
        first[0] = 0;
        return Py_BuildValue("NN", a_first, a_adj);
    }
    int64_t *first = PyArray_DATA((PyArrayObject *)a_first);
    for (Py_ssize_t j = 0; j < m; j++)
        first[keys[j] + 1]++;
    for (Py_ssize_t k = 0; k < total; k++)
        first[k + 1] += first[k];
    for (Py_ssize_t j = 0; j < m; j++)  /* first[k]: k's cursor, then all shift by one */
        adj[first[keys[j]]++] = vals[j];
    if (total)
        memmove(first + 1, first, (size_t)total * sizeof(int64_t));
    first[0] = 0;
    return Py_BuildValue("NN", a_first, a_adj);
}

/* sorted_find(keys i64, nodes i64) -> pos i64[len(nodes)]: each node's position in keys
 * (ascending, no repeats: a _Sparse view's events), -1 where absent. What
 * xplane_steps._Sparse._at's np.searchsorted answers, as one merge where the nodes ascend
 * (the grouping's are: context events, the roots), an exponential search from the last
 * position forward, a binary search below it where they do not; numpy's search of every
 * node over the whole key array was most of the contexts' reads (0.08 s of user time on
 * the 308 MB profile). */
static PyObject *py_sorted_find(PyObject *self, PyObject *args)
{
    PyObject *o_k, *o_n;
    if (!PyArg_ParseTuple(args, "OO", &o_k, &o_n))
        return NULL;
    Py_ssize_t nk = arr_len(o_k), m = arr_len(o_n);
    if (nk < 0 || m < 0) {
        PyErr_SetString(PyExc_TypeError, "sorted_find: arrays expected");
        return NULL;
    }
    const int64_t *keys = i64_arg(o_k, nk, 0, "keys");
    const int64_t *nodes = keys ? i64_arg(o_n, m, 0, "nodes") : NULL;
    if (nodes == NULL)
        return NULL;
    npy_intp dm[1] = {m};
    PyObject *a_pos = PyArray_SimpleNew(1, dm, NPY_INT64);
    if (a_pos == NULL)
        return NULL;
    int64_t *pos = PyArray_DATA((PyArrayObject *)a_pos);
    Py_ssize_t j = 0;  /* the last node's lower bound in keys */
    int64_t prev = INT64_MIN;
    for (Py_ssize_t i = 0; i < m; i++) {
        int64_t x = nodes[i];
        Py_ssize_t lo = 0, hi = j;  /* the lower bound of x is in [lo, hi] */
        if (x >= prev) {  /* at or after j: keys[j - 1] < prev <= x */
            Py_ssize_t step = 1;
            lo = j;
            while (hi < nk && keys[hi] < x) {
                lo = hi + 1;
                hi = j + step;
                step <<= 1;
            }
            if (hi > nk)
                hi = nk;
        }
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if (keys[mid] < x)
                lo = mid + 1;
            else
                hi = mid;
        }
        j = lo;
        prev = x;
        pos[i] = (j < nk && keys[j] == x) ? (int64_t)j : -1;
    }
    return a_pos;
}

static PyObject *py_host_step_db(PyObject *self, PyObject *args)
{
    PyObject *o[14];
    Py_ssize_t G;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOn", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8],
                          &o[9], &o[10], &o[11], &o[12], &o[13], &G))
        return NULL;
    Py_ssize_t n = arr_len(o[0]), nl = arr_len(o[5]), nm = arr_len(o[7]), nr = arr_len(o[9]), ni = arr_len(o[13]);
    if (n < 0 || nl < 0 || nm < 0 || nr < 0 || ni < 0 || G < 0 || n >= ((Py_ssize_t)1 << 31)) {
        PyErr_SetString(PyExc_TypeError, "host_step_db: arrays expected");
        return NULL;
    }
    /* group ids and metadata ids come int32 or int64 (one predictable branch per read) */
    const int32_t *group32, *mid32;
    const int64_t *group64, *mid64;
    int ok_ids = i32_or_i64_arg(o[0], n, "group", &group32, &group64);
    const int32_t *line = ok_ids ? typed_arg(o[1], NPY_INT32, n, "line") : NULL;
    const int64_t *off = line ? typed_arg(o[2], NPY_INT64, n, "offset") : NULL;
    const int64_t *dur = off ? typed_arg(o[3], NPY_INT64, n, "duration") : NULL;
    ok_ids = dur && i32_or_i64_arg(o[4], n, "metadata_id", &mid32, &mid64);
    const int64_t *line_ps = ok_ids ? typed_arg(o[5], NPY_INT64, nl, "line_ps") : NULL;
#define HSD_GROUP(i) (group32 ? (int64_t)group32[i] : group64[i])
#define HSD_MID(i) (mid32 ? (int64_t)mid32[i] : mid64[i])
    const int32_t *line_key = line_ps ? typed_arg(o[6], NPY_INT32, nl, "line_key") : NULL;
    const uint8_t *mflags = line_key ? typed_arg(o[7], NPY_UINT8, nm, "mid_flags") : NULL;
    const int16_t *mkind = mflags ? typed_arg(o[8], NPY_INT16, nm, "mid_kind") : NULL;
    const int32_t *rkey = mkind ? typed_arg(o[9], NPY_INT32, nr, "root_key") : NULL;
    const int64_t *rstart = rkey ? typed_arg(o[10], NPY_INT64, nr, "root_start") : NULL;
    const int64_t *rend = rstart ? typed_arg(o[11], NPY_INT64, nr, "root_end") : NULL;
    const int64_t *rgid = rend ? typed_arg(o[12], NPY_INT64, nr, "root_gid") : NULL;
    const int64_t *ridx = rgid ? typed_arg(o[13], NPY_INT64, ni, "root_idx") : NULL;
    if (ridx == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < ni; k++) {
        if (ridx[k] < 0 || ridx[k] >= n) {
            PyErr_SetString(PyExc_ValueError, "host_step_db: a root index out of range");
            return NULL;
        }
    }
    npy_intp dg[1] = {G};
    PyObject *a_begin = PyArray_ZEROS(1, dg, NPY_INT64, 0), *a_dur = PyArray_ZEROS(1, dg, NPY_INT64, 0);
    PyObject *a_comp = PyArray_ZEROS(1, dg, NPY_BOOL, 0), *a_pres = PyArray_ZEROS(1, dg, NPY_BOOL, 0);
    PyObject *a_levels = NULL, *a_cov = NULL, *out = NULL;
    int64_t *best = malloc((size_t)(G ? G : 1) * sizeof(int64_t));  /* best marker's event, -1 none */
    int64_t *first_of = malloc((size_t)(G + 1) * sizeof(int64_t));  /* the CSR of kept events */
    int32_t *kept = NULL;
    Span *scratch = NULL;
    /* root keys by group: a key matches only events of its own group (root_gid), so each
     * group's roots are a chain (gfirst[g], then rs[k]): one or two per group, no hash of
     * every event's start (the open-addressing table on the start before took 0.09 of
     * this pass's 0.27 s on the 308 MB profile) */
    int64_t *gfirst = malloc((size_t)(G ? G : 1) * sizeof(int64_t));
    Py_ssize_t *rs = malloc((size_t)(nr ? nr : 1) * sizeof(Py_ssize_t));
    uint8_t *is_root_idx = NULL, *is_event = NULL;
    if (!a_begin || !a_dur || !a_comp || !a_pres || !best || !first_of || !gfirst || !rs) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    int64_t *begin = PyArray_DATA((PyArrayObject *)a_begin), *sdur = PyArray_DATA((PyArrayObject *)a_dur);
    npy_bool *has_comp = PyArray_DATA((PyArrayObject *)a_comp), *present = PyArray_DATA((PyArrayObject *)a_pres);
    for (Py_ssize_t g = 0; g < G; g++)
        gfirst[g] = -1;
    for (Py_ssize_t k = nr - 1; k >= 0; k--) {  /* a root of no group here matches nothing */
        rs[k] = -1;
        if (rgid[k] >= 0 && rgid[k] < G) {
            rs[k] = gfirst[rgid[k]];
            gfirst[rgid[k]] = k;
        }
    }
    if (ni) {
        is_root_idx = calloc((size_t)n, 1);
        if (!is_root_idx) { PyErr_NoMemory(); goto done; }
        for (Py_ssize_t k = 0; k < ni; k++)
            is_root_idx[ridx[k]] = 1;
    }
    is_event = malloc((size_t)(n ? n : 1));  /* pass 1's verdict: a typed event of its group */
    if (!is_event) { PyErr_NoMemory(); goto done; }
    int64_t first_ps = INT64_MAX;
    uint32_t kinds_seen[2048] = {0};  /* EventType values (int16, >= 0 here) seen on events */
    int bad_kind = 0;
    for (Py_ssize_t g = 0; g < G; g++)
        best[g] = -1;
    /* pass 1: the earliest event, each group's longest marker, types, host compute; every
     * index read here and in the passes after it is checked here, before its first use */
    int bad_index = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t g = HSD_GROUP(i), m = HSD_MID(i);
        if (g >= G || g < -1 || line[i] < 0 || line[i] >= nl || m < 0 || m >= nm) {
            bad_index = 1;
            break;
        }
        int64_t b0 = line_ps[line[i]] + off[i];
        if (b0 < first_ps)
            first_ps = b0;
        is_event[i] = 0;
        if (g < 0)
            continue;
        present[g] = 1;
        uint8_t fl = mflags[m];
        int marker = (fl & 1) || (is_root_idx && is_root_idx[i]);
        for (Py_ssize_t k = marker ? -1 : gfirst[g]; k >= 0 && !marker; k = rs[k])
            marker = rstart[k] == off[i] && rend[k] == off[i] + dur[i] && rkey[k] == line_key[line[i]];
        if (marker) {
            if (best[g] < 0 || dur[i] > dur[best[g]])
                best[g] = i;
        } else if (fl & 2) {
            is_event[i] = 1;
            int16_t kd = mkind[m];
            if (kd < 0 || kd >= 2048 * 32) { bad_kind = 1; break; }
            kinds_seen[kd >> 5] |= 1u << (kd & 31);
            if (kd == 10)  /* HOST_COMPUTE */
                has_comp[g] = 1;
        }
    }
    if (bad_index) {
        PyErr_SetString(PyExc_ValueError, "host_step_db: a group, line or metadata id out of range");
        goto done;
    }
    if (bad_kind) {
        PyErr_SetString(PyExc_ValueError, "host_step_db: an event type out of range");
        goto done;
    }
    for (Py_ssize_t g = 0; g < G; g++) {
        if (best[g] >= 0) {
            int64_t i = best[g];
            begin[g] = line_ps[line[i]] + off[i];
            sdur[g] = dur[i];
        }
    }
    /* pass 2: how many events each group keeps (clipped to its step, not empty) */
    memset(first_of, 0, (size_t)(G + 1) * sizeof(int64_t));
#define HSD_EVENT(i, g, s, e)                                                                  \
    if (!is_event[i])                                                                          \
        continue;                                                                              \
    int64_t g = HSD_GROUP(i);                                                                  \
    int64_t b0_ = line_ps[line[i]] + off[i];                                                   \
    int64_t s = b0_ > begin[g] ? b0_ : begin[g];                                               \
    int64_t e = b0_ + dur[i] < begin[g] + sdur[g] ? b0_ + dur[i] : begin[g] + sdur[g];         \
    if (e <= s)                                                                                \
        continue;
    for (Py_ssize_t i = 0; i < n; i++) {  /* is_event 2: kept (pass 3 reads only that) */
        HSD_EVENT(i, g, s, e)
        first_of[g + 1]++;
        is_event[i] = 2;
    }
    for (Py_ssize_t g = 0; g < G; g++)
        first_of[g + 1] += first_of[g];
    Py_ssize_t nkept = first_of[G], maxg = 0;
    for (Py_ssize_t g = 0; g < G; g++)
        if (first_of[g + 1] - first_of[g] > maxg)
            maxg = first_of[g + 1] - first_of[g];
    kept = malloc((size_t)(nkept ? nkept : 1) * sizeof(int32_t));
    scratch = malloc((size_t)(maxg ? maxg : 1) * sizeof(Span));
    if (!kept || !scratch) { PyErr_NoMemory(); goto done; }
    {
        int64_t *fill = best;  /* reused: the next free slot of each group */
        for (Py_ssize_t g = 0; g < G; g++)
            fill[g] = first_of[g];
        for (Py_ssize_t i = 0; i < n; i++)  /* pass 3: the kept events, by group */
            if (is_event[i] == 2)
                kept[fill[HSD_GROUP(i)]++] = (int32_t)i;
    }
#undef HSD_EVENT
    int16_t levels[64];
    Py_ssize_t L = 0;
    for (int kd = 0; kd < 2048 * 32; kd++) {
        if (kinds_seen[kd >> 5] & (1u << (kd & 31))) {
            if (L == 64) {
                PyErr_SetString(PyExc_ValueError, "host_step_db: more than 64 event types");
                goto done;
            }
            levels[L++] = (int16_t)kd;
        }
    }
    npy_intp dl[1] = {L}, dc[1] = {L * G};
    a_levels = PyArray_SimpleNew(1, dl, NPY_INT16);
    a_cov = PyArray_ZEROS(1, dc, NPY_INT64, 0);
    if (!a_levels || !a_cov)
        goto done;
    memcpy(PyArray_DATA((PyArrayObject *)a_levels), levels, (size_t)L * sizeof(int16_t));
    int64_t *cov = PyArray_DATA((PyArrayObject *)a_cov);
    for (Py_ssize_t g = 0; g < G; g++) {
        Py_ssize_t m = 0;
        int64_t lo = begin[g], hi = begin[g] + sdur[g];
        for (int64_t k = first_of[g]; k < first_of[g + 1]; k++) {
            int64_t i = kept[k], b0 = line_ps[line[i]] + off[i], e0 = b0 + dur[i];
            scratch[m].s = b0 > lo ? b0 : lo;
            scratch[m].e = e0 < hi ? e0 : hi;
            scratch[m].kind = mkind[HSD_MID(i)];
            m++;
        }
        int sorted = 1;
        for (Py_ssize_t k = 1; k < m && sorted; k++)
            sorted = scratch[k - 1].s <= scratch[k].s;
        if (!sorted)  /* the union of a level's spans needs them by start (ties: any order) */
            qsort(scratch, (size_t)m, sizeof(Span), span_cmp);
        for (Py_ssize_t l = 0; l < L; l++) {
            int64_t total = 0, ps = 0, pe = 0;
            int open = 0;
            for (Py_ssize_t k = 0; k < m; k++) {
                if (scratch[k].kind < levels[l])
                    continue;
                if (!open || scratch[k].s > pe) {  /* a new piece of the union */
                    if (open)
                        total += pe - ps;
                    ps = scratch[k].s;
                    pe = scratch[k].e;
                    open = 1;
                } else if (scratch[k].e > pe) {
                    pe = scratch[k].e;
                }
            }
            if (open)
                total += pe - ps;
            cov[l * G + g] = total;
        }
    }
    out = Py_BuildValue("LOOOOOO", (long long)(n ? first_ps : 0), a_begin, a_dur, a_comp, a_pres, a_levels, a_cov);
done:
    Py_XDECREF(a_begin);
    Py_XDECREF(a_dur);
    Py_XDECREF(a_comp);
    Py_XDECREF(a_pres);
    Py_XDECREF(a_levels);
    Py_XDECREF(a_cov);
    free(best);
    free(first_of);
    free(kept);
    free(scratch);
    free(gfirst);
    free(rs);
    free(is_root_idx);
    free(is_event);
    return out;
}
#undef HSD_GROUP
#undef HSD_MID

/* The nesting of XProf's event forest without its edges: on a line (a run of events of
 * one line, in line order, as xplane_steps._line_segments cuts them), ConnectIntraThread's
 * stack walk (nest_sequence) puts event k under x exactly when k follows x, is not async,
 * and no non-async event between them fell outside x: once one does, the walk pops x and
 * everything above it for good. So x's nesting subtree is the run of non-async events
 * after x up to the first one x does not contain (begin and end compared as
 * nest_sequence compares them: line_ps + offset, + duration), and a walk can mark it by a
 * scan instead of through a parent array and its CSR over every event (three int64
 * arrays over 13.5 M events on the 308 MB profile). Async events have no subtree. */
typedef struct {
    const int32_t *line;
    const int64_t *lps, *off, *dur;
    const npy_bool *asy;  /* NULL: no async event */
    Py_ssize_t n, nl;
} Lines;

static int lines_init(Lines *l, PyObject *o_line, PyObject *o_lps, PyObject *o_off, PyObject *o_dur, PyObject *o_asy)
{
    memset(l, 0, sizeof *l);
    l->n = arr_len(o_line);
    l->nl = arr_len(o_lps);
    if (l->n < 0 || l->nl < 0) {
        PyErr_SetString(PyExc_TypeError, "line, line_ps: arrays expected");
        return 0;
    }
    l->line = typed_arg(o_line, NPY_INT32, l->n, "line");
    l->lps = l->line ? i64_arg(o_lps, l->nl, 0, "line_ps") : NULL;
    l->off = l->lps ? i64_arg(o_off, l->n, 0, "offset") : NULL;
    l->dur = l->off ? i64_arg(o_dur, l->n, 0, "duration") : NULL;
    if (l->dur == NULL)
        return 0;
    if (o_asy != Py_None && (l->asy = typed_arg(o_asy, NPY_BOOL, l->n, "is_async")) == NULL)
        return 0;
    for (Py_ssize_t i = 0; i < l->n; i++) {
        if (l->line[i] < 0 || l->line[i] >= l->nl) {
            PyErr_SetString(PyExc_ValueError, "a line out of range");
            return 0;
        }
    }
    return 1;
}

static int push_node(Walk *w, Py_ssize_t *tail, int64_t c)
{
    if (*tail == w->cap) {
        int64_t *q = realloc(w->queue, (size_t)w->cap * 2 * sizeof(int64_t));
        if (q == NULL)
            return 0;
        w->queue = q;
        w->cap *= 2;
    }
    w->queue[(*tail)++] = c;
    return 1;
}

/* The other edges of node (xkids[xf[node]:xf[node + 1]]) not yet grouped: gid, queued. */
static const char *range_other(Walk *w, Py_ssize_t *tail, int64_t node, int64_t gid)
{
    int64_t a = w->xf ? w->xf[node] : w->xf32[node], z = w->xf ? w->xf[node + 1] : w->xf32[node + 1];
    if (a < 0 || z > w->nx || a > z)
        return "edge offsets out of range";
    for (int64_t j = a; j < z; j++) {
        int64_t c = w->xkids[j];
        if (c < 0 || c >= w->total)
            return "node id out of range";
        if (w->group[c] >= 0)
            continue;
        w->group[c] = (int32_t)gid;
        if (!push_node(w, tail, c))
            return "out of memory";
    }
    return NULL;
}

/* walk_from with the nesting edges as scans (above): a node taken from the queue (the
 * root, or one reached by another edge) marks its subtree's ungrouped events and follows
 * their other edges; an event reached by the scan is not queued (its own subtree lies in
 * the same scan). The same nodes as walk_from: a grouped node's descendants are all
 * grouped (every walk groups what it reaches), so skipping one skips nothing new. */
static const char *range_walk_from(Walk *w, const Lines *l, int64_t root, int64_t gid)
{
    if (w->group[root] >= 0)
        return NULL;
    Py_ssize_t head = 0, tail = 0;
    const char *err;
    w->group[root] = (int32_t)gid;
    w->queue[tail++] = root;
    while (head < tail) {
        int64_t x = w->queue[head++];
        if ((err = range_other(w, &tail, x, gid)) != NULL)
            return err;
        if (x >= l->n || (l->asy && l->asy[x]))
            continue;  /* a node after the events (a threadpool region) or async: no subtree */
        int32_t li = l->line[x];
        int64_t b = l->lps[li] + l->off[x], e = b + l->dur[x];
        for (Py_ssize_t k = x + 1; k < l->n && l->line[k] == li; k++) {
            if (l->asy && l->asy[k])
                continue;
            int64_t kb = l->lps[li] + l->off[k];
            if (!(b <= kb && kb + l->dur[k] <= e))
                break;
            if (w->group[k] >= 0)
                continue;
            w->group[k] = (int32_t)gid;
            if ((err = range_other(w, &tail, k, gid)) != NULL)
                return err;
        }
    }
    return NULL;
}

/* range_roots(roots, group, line, line_ps, offset, duration, is_async|None, xfirst, xkids)
 * -> the roots walked: group_roots with the nesting edges as scans of the lines (events
 * 0..len(line)-1; nodes after them, threadpool regions, have other edges only). */
static PyObject *py_range_roots(PyObject *self, PyObject *args)
{
    PyObject *o_roots, *o_group, *o_line, *o_lps, *o_off, *o_dur, *o_asy, *o_xf, *o_xk;
    Walk w;
    Lines l;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO", &o_roots, &o_group, &o_line, &o_lps, &o_off, &o_dur, &o_asy, &o_xf,
                          &o_xk))
        return NULL;
    Py_ssize_t nr = arr_len(o_roots);
    const int64_t *roots = nr >= 0 ? i64_arg(o_roots, nr, 0, "roots") : NULL;
    if (roots == NULL || !lines_init(&l, o_line, o_lps, o_off, o_dur, o_asy))
        return NULL;
    memset(&w, 0, sizeof w);
    if (!PyArray_Check(o_group) || !PyArray_Check(o_xk)) {
        PyErr_SetString(PyExc_TypeError, "group (int32), xkids (int64): arrays");
        return NULL;
    }
    w.total = PyArray_SIZE((PyArrayObject *)o_group);
    w.nx = PyArray_SIZE((PyArrayObject *)o_xk);
    if (w.total < l.n) {
        PyErr_SetString(PyExc_ValueError, "group: shorter than the events");
        return NULL;
    }
    w.group = group_arg(o_group);
    if (w.group == NULL)
        return NULL;
    /* xfirst: int64, or int32 (edges_csr's narrow: half the array over every node) */
    if (PyArray_Check(o_xf) && PyArray_TYPE((PyArrayObject *)o_xf) == NPY_INT32 && PyArray_NDIM((PyArrayObject *)o_xf) == 1
        && PyArray_IS_C_CONTIGUOUS((PyArrayObject *)o_xf) && PyArray_SIZE((PyArrayObject *)o_xf) >= w.total + 1)
        w.xf32 = PyArray_DATA((PyArrayObject *)o_xf);
    else if ((w.xf = i64_arg(o_xf, w.total + 1, 0, "xfirst")) == NULL)
        return NULL;
    w.xkids = i64_arg(o_xk, w.nx, 0, "xkids");
    if (w.xkids == NULL)
        return NULL;
    w.cap = 256;
    if ((w.queue = malloc((size_t)w.cap * sizeof(int64_t))) == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t k = 0; k < nr; k++)
        if (roots[k] < 0 || roots[k] >= w.total)
            return walk_error(&w, "root out of range");
    npy_intp d[1] = {nr};
    PyObject *a_out = PyArray_SimpleNew(1, d, NPY_INT64);
    if (a_out == NULL)
        return walk_error(&w, "out of memory");
    int64_t *out = PyArray_DATA((PyArrayObject *)a_out);
    Py_ssize_t m = 0;
    const char *err = NULL;
    for (Py_ssize_t k = 0; k < nr && err == NULL; k++) {
        if (w.group[roots[k]] >= 0)
            continue;
        err = range_walk_from(&w, &l, roots[k], m);
        out[m++] = roots[k];
    }
    if (err != NULL) {
        Py_DECREF(a_out);
        return walk_error(&w, err);
    }
    free(w.queue);
    PyObject *res = PySequence_GetSlice(a_out, 0, m);
    Py_DECREF(a_out);
    return res;
}

/* nest_parents_at(nodes, line, line_ps, offset, duration, is_async|None) -> the nesting
 * parent of each of the sorted event ids ``nodes`` (-1: none), by nest_sequence's stack
 * walk over each line that holds one, up to the last one asked, writing nothing per event. */
static PyObject *py_nest_parents_at(PyObject *self, PyObject *args)
{
    PyObject *o_nodes, *o_line, *o_lps, *o_off, *o_dur, *o_asy;
    Lines l;
    if (!PyArg_ParseTuple(args, "OOOOOO", &o_nodes, &o_line, &o_lps, &o_off, &o_dur, &o_asy))
        return NULL;
    Py_ssize_t nq = arr_len(o_nodes);
    const int64_t *q = nq >= 0 ? i64_arg(o_nodes, nq, 0, "nodes") : NULL;
    if (q == NULL || !lines_init(&l, o_line, o_lps, o_off, o_dur, o_asy))
        return NULL;
    for (Py_ssize_t k = 0; k < nq; k++) {
        if (q[k] < 0 || q[k] >= l.n || (k && q[k] <= q[k - 1])) {
            PyErr_SetString(PyExc_ValueError, "nodes: sorted, unique event ids");
            return NULL;
        }
    }
    npy_intp d[1] = {nq};
    PyObject *a_out = PyArray_SimpleNew(1, d, NPY_INT64);
    if (a_out == NULL)
        return NULL;
    int64_t *out = PyArray_DATA((PyArrayObject *)a_out);
    int64_t *stack = malloc((size_t)(l.n ? l.n : 1) * sizeof(int64_t));
    if (stack == NULL) {
        Py_DECREF(a_out);
        return PyErr_NoMemory();
    }
    Py_ssize_t k = 0;
    while (k < nq) {
        Py_ssize_t i = q[k];
        int32_t li = l.line[i];
        Py_ssize_t s = i;  /* the line's run starts at s */
        while (s > 0 && l.line[s - 1] == li)
            s--;
        Py_ssize_t top = 0;
        for (Py_ssize_t j = s; j < l.n && l.line[j] == li && k < nq; j++) {
            int is_q = (j == q[k]);
            if (l.asy && l.asy[j]) {
                if (is_q)
                    out[k++] = -1;
                continue;
            }
            int64_t b = l.lps[li] + l.off[j], e = b + l.dur[j];
            int64_t par = -1;
            while (top) {
                int64_t t = stack[top - 1];
                int64_t tb = l.lps[li] + l.off[t];
                if (tb <= b && e <= tb + l.dur[t]) {
                    par = t;
                    break;
                }
                top--;
            }
            if (is_q)
                out[k++] = par;
            stack[top++] = j;
        }
    }
    free(stack);
    return a_out;
}

static PyObject *py_set_truncated(PyObject *self, PyObject *cls)
{
    Py_XINCREF(cls);
    Py_XSETREF(Truncated, cls);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"event_run", py_event_run, METH_VARARGS,
     "event_run(buf, pos, end, stop, max_n) -> (starts, ends, after): the XLine.events entries from pos "
     "that end by stop (at most max_n)"},
    {"event_run_into", py_event_run_into, METH_VARARGS,
     "event_run_into(buf, pos, end, starts, ends, at) -> (count, after): a run's entries into the arrays from at"},
    {"run_count", py_run_count, METH_VARARGS, "run_count(buf, pos, end[, stop]) -> (count, after) of a run of events (those ending by stop)"},
    {"decode_events", py_decode_events, METH_VARARGS,
     "decode_events(buf, starts, ends, kmids, kvals, chunk[, run_count[, between]]) -> (metadata_id, offset_ps, "
     "duration_ps, kinds); with run_count, starts/ends/run_count are runs of events (pos, line end, count); "
     "between: called after each chunk but the last"},
    {"nest_sequence", py_nest_sequence, METH_VARARGS,
     "nest_sequence(ids, ts, end, is_async, nest_parent, below): one line's nesting stack walk, in place"},
    {"group_roots", py_group_roots, METH_VARARGS,
     "group_roots(roots, group, kfirst, kids, xfirst, xkids) -> the roots walked, each the next group id"},
    {"group_from", py_group_from, METH_VARARGS,
     "group_from(root, gid, group, kfirst, kids, xfirst, xkids): one root's group ids, in place"},
    {"nest_children", py_nest_children, METH_O,
     "nest_children(parent_of) -> (first, kids): the nesting edges as a CSR, children in node order"},
    {"event_times", py_event_times, METH_VARARGS,
     "event_times(line, offset, duration, line_ps, ts, end): absolute begins and ends into ts and end"},
    {"range_roots", py_range_roots, METH_VARARGS,
     "range_roots(roots, group, line, line_ps, offset, duration, is_async, xfirst, xkids) -> the roots walked: "
     "group_roots with each nesting subtree marked by a scan of its line"},
    {"nest_parents_at", py_nest_parents_at, METH_VARARGS,
     "nest_parents_at(nodes, line, line_ps, offset, duration, is_async) -> the nesting parents of sorted events"},
    {"edges_csr", py_edges_csr, METH_VARARGS,
     "edges_csr(keys, values, total[, narrow]) -> (first, adj): edges by key, in the order given; narrow: "
     "first as int32 where the edges are under 2^31 (range_roots reads it)"},
    {"host_step_db", py_host_step_db, METH_VARARGS,
     "host_step_db(group, line, offset, duration, metadata_id, line_ps, line_key, mid_flags, mid_kind, root_key, "
     "root_start, root_end, root_gid, root_idx, n_groups) -> (first_ps, begin, dur, has_compute, present, levels, "
     "covers): a CPU-only profile's host step database"},
    {"sorted_find", py_sorted_find, METH_VARARGS,
     "sorted_find(keys, nodes) -> pos: each node's position in the ascending keys, -1 where absent"},
    {"set_truncated", py_set_truncated, METH_O, "the exception class raised for truncation"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_xplane_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__xplane_scan(void)
{
    import_array();
    return PyModule_Create(&module);
}
