/* The memory viewer's heap simulation (tools/memory_viewer.py `_simulate_py`, XProf's
 * ProcessHeapSimulatorTrace) in one pass over a serialized xla.HeapSimulatorTrace.
 *
 * memory_viewer.py keeps the Python twin and uses it when this module is absent, when
 * PROFSCOPE_NATIVE=0, and whenever this pass declines a trace (returns None): a trace
 * the replay rejects (a buffer freed twice, a negative heap, a SHARE_WITH cycle, an
 * unknown event kind), a heap past int64, a wire format it does not read. The Python
 * twin then gives XProf's answer or its exact error, so this file has no error text of
 * its own to keep equal. tests/test_memory_viewer_native.py asserts both paths give
 * identical results on every module of the real fixtures and on a synthetic one.
 *
 * Wire format read (xla/service/hlo.proto): HeapSimulatorTrace { repeated Event events = 1;
 * bool whole_module_simulation = 2; int64 buffer_allocation_index = 3; } and Event {
 * Kind kind = 1; int64 buffer_id = 2; string computation_name = 3; string
 * instruction_name = 4; int64 share_with_canonical_id = 5; }: a scalar given twice takes
 * its last value, as protobuf's parsers do; unknown fields are skipped by wire type.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { ALLOC = 0, FREE = 1, SHARE_WITH = 2 };

#include "_protowire.h"  /* Buf, varint */

/* Skip one field of wire type `wt` (the tag already read); -1 on a bad one. */
static int skip(Buf *b, int wt) {
    uint64_t n;
    switch (wt) {
    case 0: return varint(b, &n);
    case 1: if (b->end - b->p < 8) return -1; b->p += 8; return 0;
    case 2:
        if (varint(b, &n) || n > (uint64_t)(b->end - b->p)) return -1;
        b->p += n;
        return 0;
    case 5: if (b->end - b->p < 4) return -1; b->p += 4; return 0;
    default: return -1; /* groups: not in this message */
    }
}

typedef struct {
    int32_t kind;
    int64_t buffer_id, share_with;
    const uint8_t *name;
    Py_ssize_t name_len;
} Event;

static int event(const uint8_t *p, const uint8_t *end, Event *e) {
    Buf b = {p, end};
    memset(e, 0, sizeof *e);
    e->name = (const uint8_t *)"";
    while (b.p < b.end) {
        uint64_t tag, v;
        if (varint(&b, &tag)) return -1;
        int field = (int)(tag >> 3), wt = (int)(tag & 7);
        if (field == 1 && wt == 0) {
            if (varint(&b, &v)) return -1;
            e->kind = (int32_t)v; /* an enum is an int32: a negative one is 10 bytes */
        } else if (field == 2 && wt == 0) {
            if (varint(&b, &v)) return -1;
            e->buffer_id = (int64_t)v;
        } else if (field == 5 && wt == 0) {
            if (varint(&b, &v)) return -1;
            e->share_with = (int64_t)v;
        } else if (field == 4 && wt == 2) {
            if (varint(&b, &v) || v > (uint64_t)(b.end - b.p)) return -1;
            e->name = b.p;
            e->name_len = (Py_ssize_t)v;
            b.p += v;
        } else if (skip(&b, wt)) {
            return -1;
        }
    }
    return 0;
}

/* The logical buffer with id `id` (ids sorted ascending), or -1. */
static Py_ssize_t find(const int64_t *ids, Py_ssize_t n, int64_t id) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (ids[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && ids[lo] == id ? lo : -1;
}

/* The canonical root of buffer j, or -1 past `limit` steps (a cycle: the twin's error). */
static Py_ssize_t root_of(const int32_t *canon, Py_ssize_t j, Py_ssize_t limit) {
    Py_ssize_t n = 0;
    while (canon[j] >= 0) {
        j = canon[j];
        if (++n > limit) return -1;
    }
    return j;
}

static int check(PyArrayObject *a, int type, npy_intp n, const char *what) {
    if (PyArray_TYPE(a) != type || PyArray_NDIM(a) != 1 || !PyArray_IS_C_CONTIGUOUS(a) ||
        PyArray_DIM(a, 0) != n || !PyArray_ISWRITEABLE(a)) {
        PyErr_Format(PyExc_ValueError, "_heap_sim: %s has the wrong dtype, shape or layout", what);
        return 0;
    }
    return 1;
}

#define GROW(arr, cap, len, type)                                         \
    if ((len) == (cap)) {                                                 \
        size_t nc = (cap) ? (cap) * 2 : 1024;                             \
        type *na = realloc((arr), nc * sizeof(type));                     \
        if (!na) { PyErr_NoMemory(); goto fail; }                         \
        (arr) = na; (cap) = nc;                                           \
    }

/* simulate(trace bytes, ids int64[L] sorted, size int64[L], unpadded int64[L],
 *          span_start int64[L] (out, -1: none), span_end int64[L] (out), seen uint8[L] (out),
 *          with_names)
 * -> None (declined: run the twin), or a tuple
 *    (events, heap int64[n+1], unpadded int64[n+1], kinds bytes, buffers int64[n+1],
 *     names list | None, peak, peak_unpadded, peak_pos, peak_step,
 *     entry ids int64[k], entry gone int64[k] (INT64_MAX: still live), peak_entries,
 *     display log int64[d, 3] (step, root id, shown id))
 * The per-buffer outputs are the twin's _LB fields after the replay. */
static PyObject *simulate(PyObject *self, PyObject *args) {
    Py_buffer tb;
    PyArrayObject *ids_a, *size_a, *unp_a, *ss_a, *se_a, *seen_a;
    int with_names;
    if (!PyArg_ParseTuple(args, "y*O!O!O!O!O!O!p", &tb, &PyArray_Type, &ids_a, &PyArray_Type, &size_a,
                          &PyArray_Type, &unp_a, &PyArray_Type, &ss_a, &PyArray_Type, &se_a,
                          &PyArray_Type, &seen_a, &with_names))
        return NULL;
    PyObject *ret = NULL, *names = NULL;
    PyArrayObject *heap_a = NULL, *unpt_a = NULL, *buf_a = NULL, *eid_a = NULL, *egone_a = NULL, *log_a = NULL;
    const uint8_t **ev_at = NULL;
    size_t *ev_len = NULL, nev = 0, ev_cap = 0;
    int32_t *canon = NULL;
    int64_t *ref = NULL, *head = NULL, *next = NULL, *ent_id = NULL, *ent_gone = NULL, *logv = NULL;
    size_t ent_len = 0, ent_cap = 0, next_cap = 0, log_len = 0, log_cap = 0;
    char *kinds = NULL;
    int declined = 0;

    npy_intp L = PyArray_SIZE(ids_a);
    if (!check(ids_a, NPY_INT64, L, "ids") || !check(size_a, NPY_INT64, L, "size") ||
        !check(unp_a, NPY_INT64, L, "unpadded") || !check(ss_a, NPY_INT64, L, "span_start") ||
        !check(se_a, NPY_INT64, L, "span_end") || !check(seen_a, NPY_UINT8, L, "seen"))
        goto fail;
    const int64_t *ids = PyArray_DATA(ids_a), *size = PyArray_DATA(size_a), *unpadded = PyArray_DATA(unp_a);
    int64_t *span_start = PyArray_DATA(ss_a), *span_end = PyArray_DATA(se_a);
    uint8_t *seen = PyArray_DATA(seen_a);
    for (npy_intp j = 1; j < L; j++)
        if (ids[j] <= ids[j - 1]) {
            PyErr_SetString(PyExc_ValueError, "_heap_sim: ids must be sorted and distinct");
            goto fail;
        }

    /* The events' extents: field 1 of the trace, in order. */
    Buf b = {tb.buf, (const uint8_t *)tb.buf + tb.len};
    while (b.p < b.end) {
        uint64_t tag, n;
        if (varint(&b, &tag)) { declined = 1; goto done; }
        if ((tag >> 3) == 1 && (tag & 7) == 2) {
            if (varint(&b, &n) || n > (uint64_t)(b.end - b.p)) { declined = 1; goto done; }
            if (nev == ev_cap) {
                size_t nc = ev_cap ? ev_cap * 2 : 1024;
                const uint8_t **na = realloc(ev_at, nc * sizeof *na);
                size_t *nl = na ? realloc(ev_len, nc * sizeof *nl) : NULL;
                if (na) ev_at = na;
                if (!na || !nl) { PyErr_NoMemory(); goto fail; }
                ev_len = nl;
                ev_cap = nc;
            }
            ev_at[nev] = b.p;
            ev_len[nev++] = (size_t)n;
            b.p += n;
        } else if (skip(&b, (int)(tag & 7))) {
            declined = 1;
            goto done;
        }
    }

    npy_intp np1 = (npy_intp)nev + 1;
    heap_a = (PyArrayObject *)PyArray_EMPTY(1, &np1, NPY_INT64, 0);
    unpt_a = (PyArrayObject *)PyArray_EMPTY(1, &np1, NPY_INT64, 0);
    buf_a = (PyArrayObject *)PyArray_EMPTY(1, &np1, NPY_INT64, 0);
    kinds = malloc(np1);
    canon = malloc((L ? L : 1) * sizeof *canon);
    ref = calloc(L ? L : 1, sizeof *ref);
    head = malloc((L ? L : 1) * sizeof *head);
    if (!heap_a || !unpt_a || !buf_a) goto fail;
    if (!kinds || !canon || !ref || !head) { PyErr_NoMemory(); goto fail; }
    if (with_names && !(names = PyList_New(np1))) goto fail;
    for (npy_intp j = 0; j < L; j++) {
        canon[j] = -1;
        head[j] = -1;
        span_start[j] = -1;
        span_end[j] = 0;
        seen[j] = 0;
    }
    memset(kinds, '-', np1);
    int64_t *heap_tl = PyArray_DATA(heap_a), *unp_tl = PyArray_DATA(unpt_a), *ev_buf = PyArray_DATA(buf_a);
    int64_t heap = 0, unp = 0, peak = 0, peak_unp = 0, peak_pos = 0, step = 0, peak_step = -1, peak_entries = 0;
    const int64_t last = (int64_t)nev - 1;
    const Py_ssize_t limit = (Py_ssize_t)L + 1;

/* heap += size of j; a new peak is the heap's first time above every earlier value */
#define PUSH(entry_j, entry_id)                                                                   \
    do {                                                                                          \
        step++;                                                                                   \
        GROW(ent_id, ent_cap, ent_len, int64_t);                                                  \
        if (ent_cap > next_cap) {                                                                 \
            int64_t *ng = realloc(ent_gone, ent_cap * sizeof *ng);                                \
            if (ng) ent_gone = ng;                                                                \
            int64_t *nn = ng ? realloc(next, ent_cap * sizeof *nn) : NULL;                        \
            if (!ng || !nn) { PyErr_NoMemory(); goto fail; }                                      \
            next = nn;                                                                            \
            next_cap = ent_cap;                                                                   \
        }                                                                                         \
        size_t k_ = ent_len++;                                                                    \
        ent_id[k_] = (entry_id);                                                                  \
        ent_gone[k_] = INT64_MAX;                                                                 \
        next[k_] = head[entry_j];                                                                 \
        head[entry_j] = (int64_t)k_;                                                              \
        if (__builtin_add_overflow(heap, size[entry_j], &heap) ||                                 \
            __builtin_add_overflow(unp, unpadded[entry_j], &unp)) { declined = 1; goto done; }    \
        if (heap > peak) {                                                                        \
            peak = heap; peak_pos = i; peak_unp = unp;                                            \
            peak_step = step; peak_entries = (int64_t)k_ + 1;                                     \
        }                                                                                         \
    } while (0)

    for (int64_t i = 0; i < (int64_t)nev; i++) {
        Event e;
        if (event(ev_at[i], ev_at[i] + ev_len[i], &e)) { declined = 1; goto done; }
        heap_tl[i] = heap;
        unp_tl[i] = unp;
        ev_buf[i] = e.buffer_id;
        if (with_names) {
            PyObject *s = PyUnicode_DecodeUTF8((const char *)e.name, e.name_len, NULL);
            if (!s) { PyErr_Clear(); declined = 1; goto done; }
            PyList_SET_ITEM(names, i, s);
        }
        Py_ssize_t j = find(ids, L, e.buffer_id);
        if (j < 0) continue;
        seen[j] = 1;
        if (e.kind == ALLOC) {
            Py_ssize_t r = root_of(canon, j, limit);
            if (r < 0) { declined = 1; goto done; }
            kinds[i] = 'A';
            ref[r]++;
            PUSH(j, ids[j]);
            span_start[j] = i;
            span_end[j] = last;
        } else if (e.kind == FREE) {
            kinds[i] = 'F';
            Py_ssize_t r = root_of(canon, j, limit);
            if (r < 0) { declined = 1; goto done; }
            if (--ref[r] <= 0) {
                if (ref[r] < 0) { declined = 1; goto done; }
                step++;
                for (int64_t k = head[r]; k >= 0; k = next[k]) ent_gone[k] = step;
                head[r] = -1;
                if (__builtin_sub_overflow(heap, size[r], &heap) ||
                    __builtin_sub_overflow(unp, unpadded[r], &unp) || heap < 0) { declined = 1; goto done; }
                if (span_start[r] >= 0 && span_end[r] == last) span_end[r] = i;
            }
            if (canon[j] >= 0 && span_start[j] >= 0) span_end[j] = i;
        } else if (e.kind == SHARE_WITH) {
            kinds[i] = 'S';
            Py_ssize_t c = find(ids, L, e.share_with);
            if (c < 0) continue;
            canon[j] = (int32_t)c;
            Py_ssize_t r = root_of(canon, c, limit);
            if (r < 0) { declined = 1; goto done; }
            if (++ref[r] == 1) {
                step++;
                GROW(logv, log_cap, log_len, int64_t);
                logv[log_len++] = step;
                GROW(logv, log_cap, log_len, int64_t);
                logv[log_len++] = ids[r];
                GROW(logv, log_cap, log_len, int64_t);
                logv[log_len++] = ids[j];
                span_start[j] = i;
                span_end[j] = last;
                PUSH(r, ids[r]);
            }
        } else {
            declined = 1; /* the twin's "Unhandled event kind" */
            goto done;
        }
    }
    heap_tl[nev] = heap;
    unp_tl[nev] = unp;
    ev_buf[nev] = -1;
    if (with_names) {
        PyObject *s = PyUnicode_FromStringAndSize("", 0);
        if (!s) goto fail;
        PyList_SET_ITEM(names, nev, s);
    }

    npy_intp ne = (npy_intp)ent_len, dims[2] = {(npy_intp)(log_len / 3), 3};
    eid_a = (PyArrayObject *)PyArray_EMPTY(1, &ne, NPY_INT64, 0);
    egone_a = (PyArrayObject *)PyArray_EMPTY(1, &ne, NPY_INT64, 0);
    log_a = (PyArrayObject *)PyArray_EMPTY(2, dims, NPY_INT64, 0);
    if (!eid_a || !egone_a || !log_a) goto fail;
    if (ent_len) {
        memcpy(PyArray_DATA(eid_a), ent_id, ent_len * sizeof(int64_t));
        memcpy(PyArray_DATA(egone_a), ent_gone, ent_len * sizeof(int64_t));
    }
    if (log_len) memcpy(PyArray_DATA(log_a), logv, log_len * sizeof(int64_t));
    ret = Py_BuildValue("nNNy#NOLLLLNNLN", (Py_ssize_t)nev, heap_a, unpt_a, kinds, (Py_ssize_t)np1, buf_a,
                        names ? names : Py_None, (long long)peak, (long long)peak_unp, (long long)peak_pos,
                        (long long)peak_step, eid_a, egone_a, (long long)peak_entries, log_a);
    heap_a = unpt_a = buf_a = eid_a = egone_a = log_a = NULL; /* stolen by N */
    goto out;

done:
    if (declined && !PyErr_Occurred()) {
        ret = Py_None;
        Py_INCREF(ret);
        goto out;
    }
fail:
    ret = NULL;
out:
    Py_XDECREF(names);
    Py_XDECREF(heap_a);
    Py_XDECREF(unpt_a);
    Py_XDECREF(buf_a);
    Py_XDECREF(eid_a);
    Py_XDECREF(egone_a);
    Py_XDECREF(log_a);
    free(ev_at);
    free(ev_len);
    free(canon);
    free(ref);
    free(head);
    free(next);
    free(ent_id);
    free(ent_gone);
    free(logv);
    free(kinds);
    PyBuffer_Release(&tb);
    return ret;
}

static PyMethodDef methods[] = {
    {"simulate", simulate, METH_VARARGS, "The heap simulation of one trace (memory_viewer._simulate_py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_heap_sim", NULL, -1, methods};

PyMODINIT_FUNC PyInit__heap_sim(void) {
    import_array();
    return PyModule_Create(&module);
}
