/* The trace index build's linear passes (tools/trace_index.py): the raw columns' first pass
 * (shift, clip, last end, events per track), events grouped by track, nesting depths, the
 * sort by duration level, the column gathers into the index order, the resolution tiers'
 * picks and their merge into start order, each in one pass over the rows; the merge of
 * line ranges' own sorts into the index order; XProf's zoom levels
 * (tools/trace_visibility.py), one pass per level; and a later window's rows
 * (TraceIndex.window_rows), one pass over its candidates.
 *
 * trace_index.py keeps the numpy path for every function here and selects it when this
 * module is absent (or PROFSCOPE_NATIVE=0); tests/test_trace_build_native.py asserts both
 * give identical answers. Inputs are numpy arrays that trace_index.py makes (C-contiguous,
 * of the dtypes checked below); every index read from them is checked against the array
 * it indexes, and a bad one raises ValueError rather than reading out of bounds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 32767 /* depths are int16 in the index */

static int check(PyArrayObject *a, int type, npy_intp n, const char *what) {
    if (PyArray_TYPE(a) != type || PyArray_NDIM(a) != 1 || !PyArray_IS_C_CONTIGUOUS(a) ||
        (n >= 0 && PyArray_DIM(a, 0) != n)) {
        PyErr_Format(PyExc_ValueError, "_trace_build: %s has the wrong dtype, shape or layout", what);
        return 0;
    }
    return 1;
}

static int writable(PyArrayObject *a, const char *what) {
    if (!PyArray_ISWRITEABLE(a)) {
        PyErr_Format(PyExc_ValueError, "_trace_build: %s is read-only", what);
        return 0;
    }
    return 1;
}

/* An optional ``release`` callable (None: none), called with the GIL every RELEASE_ROWS rows
 * a pass walks: the caller lets the pages of the memory-mapped columns passed go there
 * (trace_index._let_go_shared), so a pass over whole mapped columns holds a window of
 * them, not all (issue 40: jax308's nesting pass held 261 MiB of raw columns). Returns 0
 * with the callable's exception set. */
#define RELEASE_ROWS ((npy_intp)1 << 20)
/* zoom_levels' walk reads its rows' starts and durations at random in every duration
 * level's stretch of time at once, and a fault maps the whole page-cache folio around a
 * read (2 MiB on this machine's ext4): jax308's 2^20 rows mapped ~158 MiB of start and
 * dur between releases, 2^17 rows ~86 MiB (each level's folio at the walk's place is the
 * floor), for ~2,800 more folio faults over its 13.7 M rows (issue 40). */
#define WALK_RELEASE_ROWS ((npy_intp)1 << 17)
/* The tiers' walk, by (track, depth, start), reads the starts (index rows, by level and
 * start: mapped in the build) at random in every level's stretch of time at once, as the
 * zoom levels' walk does: between releases 2^20 rows mapped ~115 MiB of jax308's start.npy,
 * the page-started build's peak (325 MiB) with the tiers' mask and traversal; in a later
 * window's write_tiers 2^17 rows ~90 MiB, 2^16 ~60, 2^15 ~35 (its C pass's system time
 * ~0.10, ~0.12, ~0.18 s). */
#define TIERS_RELEASE_ROWS ((npy_intp)1 << 16)

static int call_release(PyObject *release) {
    if (!release || release == Py_None) return 1;
    PyObject *r = PyObject_CallNoArgs(release);
    if (!r) return 0;
    Py_DECREF(r);
    return 1;
}

/* In a pass's loop that runs without the GIL (Py_BEGIN_ALLOW_THREADS), with ``release``,
 * ``walked`` and ``released`` in scope: count a row, and every RELEASE_ROWS rows call the
 * caller's release with the GIL (call_release); leave the loop if it raised. */
#define WALKED() WALKED_EVERY(RELEASE_ROWS)
#define WALKED_EVERY(rows)                         \
    if (++walked % (rows) == 0 && release) {       \
        Py_BLOCK_THREADS                           \
        released = call_release(release);          \
        Py_UNBLOCK_THREADS                         \
        if (!released) break;                      \
    }

/* track_order(track int32[n], start int64[n], dur int64[n], ntracks[, release])
 *   -> (order int32[n], bounds int64[ntracks+1], bad bool[ntracks])
 * Rows grouped by track, in their order within a track (a stable counting sort), and
 * which tracks are not already in (start, longest first) order: those are sorted by the
 * caller (numpy's lexsort), as trace_index._track_order does. ``release``: called once the
 * track column is read (before the order check reads the starts and durations) and
 * every RELEASE_ROWS rows checked. */
static PyObject *track_order(PyObject *self, PyObject *args) {
    PyArrayObject *tr, *st, *du;
    Py_ssize_t ntracks;
    PyObject *release = NULL;
    if (!PyArg_ParseTuple(args, "O!O!O!n|O", &PyArray_Type, &tr, &PyArray_Type, &st, &PyArray_Type, &du, &ntracks,
                          &release))
        return NULL;
    npy_intp n = PyArray_SIZE(tr);
    if (!check(tr, NPY_INT32, -1, "track") || !check(st, NPY_INT64, n, "start") || !check(du, NPY_INT64, n, "dur"))
        return NULL;
    if (ntracks < 0 || n >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.track_order: bad sizes");
        return NULL;
    }
    npy_intp nb = ntracks + 1;
    PyArrayObject *order = (PyArrayObject *)PyArray_EMPTY(1, &n, NPY_INT32, 0);
    PyArrayObject *bounds = (PyArrayObject *)PyArray_ZEROS(1, &nb, NPY_INT64, 0);
    PyArrayObject *bad = (PyArrayObject *)PyArray_ZEROS(1, (npy_intp *)&ntracks, NPY_BOOL, 0);
    if (!order || !bounds || !bad) goto fail;
    const int32_t *t = PyArray_DATA(tr);
    const int64_t *s = PyArray_DATA(st), *d = PyArray_DATA(du);
    int32_t *o = PyArray_DATA(order);
    int64_t *b = PyArray_DATA(bounds);
    npy_bool *bd = PyArray_DATA(bad);
    int range_ok = 1, released = 1;
    Py_BEGIN_ALLOW_THREADS
    for (npy_intp i = 0; i < n; i++) {
        int32_t ti = t[i];
        if (ti < 0 || ti >= ntracks) { range_ok = 0; break; }
        b[ti + 1]++;
    }
    if (range_ok) {
        for (npy_intp k = 0; k < ntracks; k++) b[k + 1] += b[k];
        /* scatter, using bounds as the write positions, then shift them back */
        for (npy_intp i = 0; i < n; i++) o[b[t[i]]++] = (int32_t)i;
        for (npy_intp k = ntracks; k > 0; k--) b[k] = b[k - 1];
        b[0] = 0;
        npy_intp walked = 0;
        Py_BLOCK_THREADS
        released = call_release(release);
        Py_UNBLOCK_THREADS
        for (npy_intp k = 0; k < ntracks && released; k++) {
            for (int64_t j = b[k] + 1; j < b[k + 1]; j++) {
                int32_t p = o[j - 1], q = o[j];
                if (s[q] < s[p] || (s[q] == s[p] && d[q] > d[p])) { bd[k] = 1; break; }
                if (++walked % RELEASE_ROWS == 0 && release) {
                    Py_BLOCK_THREADS
                    released = call_release(release);
                    Py_UNBLOCK_THREADS
                    if (!released) break;
                }
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (!released) goto fail;
    if (!range_ok) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.track_order: a track id is out of range");
        goto fail;
    }
    return Py_BuildValue("NNN", order, bounds, bad);
fail:
    Py_XDECREF(order);
    Py_XDECREF(bounds);
    Py_XDECREF(bad);
    return NULL;
}

/* Doubled end: zero-length events get half a picosecond so they nest inside what holds
 * them (trace_index._ends2). The caller guarantees start + dur < 2^61. */
static inline int64_t end2(int64_t s, int64_t d) { return (s + d) * 2 + (d == 0); }

static inline void heap_push(int64_t *h, npy_intp *len, int64_t v) {
    npy_intp i = (*len)++;
    while (i > 0) {
        npy_intp p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static inline void heap_pop(int64_t *h, npy_intp *len) {
    npy_intp m = --(*len);
    if (!m) return;
    int64_t v = h[m];
    npy_intp i = 0;
    for (;;) {
        npy_intp c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

/* depths(order int32[n], bounds int64[ntracks+1], start int64[n], dur int64[n],
 *        depth int16[n] (out), max_depth int64[ntracks] (out))
 * trace_index._depths for rows in (track, start, longest first) order: per track, the
 * number of earlier events still open when an event starts (a min-heap of open ends);
 * where that makes an event end after its holder (the last earlier event one level up:
 * trace_index._crossing), the track's depths are redone with a stack of open ends
 * (trace_index._stack_depths). Depths are capped at 32767. ``release`` (optional): called
 * every RELEASE_ROWS rows walked. */
static PyObject *depths(PyObject *self, PyObject *args) {
    PyArrayObject *ord, *bnd, *st, *du, *dep, *mx;
    PyObject *release = NULL;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!|O", &PyArray_Type, &ord, &PyArray_Type, &bnd, &PyArray_Type, &st,
                          &PyArray_Type, &du, &PyArray_Type, &dep, &PyArray_Type, &mx, &release))
        return NULL;
    npy_intp n = PyArray_SIZE(st);
    npy_intp nt = PyArray_SIZE(mx);
    if (!check(ord, NPY_INT32, n, "order") || !check(bnd, NPY_INT64, nt + 1, "bounds") ||
        !check(du, NPY_INT64, n, "dur") || !check(dep, NPY_INT16, n, "depth") || !check(mx, NPY_INT64, nt, "max_depth") ||
        !check(st, NPY_INT64, n, "start") || !writable(dep, "depth") || !writable(mx, "max_depth"))
        return NULL;
    const int32_t *o = PyArray_DATA(ord);
    const int64_t *b = PyArray_DATA(bnd), *s = PyArray_DATA(st), *d = PyArray_DATA(du);
    int16_t *depth = PyArray_DATA(dep);
    int64_t *max_depth = PyArray_DATA(mx);
    /* bounds must be a partition of [0, n); every row in range */
    if (b[0] != 0 || b[nt] != n) goto bad;
    npy_intp longest = 0;
    for (npy_intp k = 0; k < nt; k++) {
        if (b[k + 1] < b[k]) goto bad;
        if (b[k + 1] - b[k] > longest) longest = b[k + 1] - b[k];
    }
    int ok = 1;
    int64_t *heap = malloc(sizeof(int64_t) * (longest ? longest : 1));
    int64_t *last = malloc(sizeof(int64_t) * (MAX_DEPTH + 1));
    if (!heap || !last) {
        free(heap);
        free(last);
        return PyErr_NoMemory();
    }
    int released = 1;
    npy_intp walked = 0;
    Py_BEGIN_ALLOW_THREADS
    for (npy_intp k = 0; k < nt && ok && released; k++) {
        npy_intp a = b[k], z = b[k + 1], hl = 0;
        int top = 0, crossing = 0;
        for (npy_intp i = a; i < z; i++) {
            int32_t r = o[i];
            if (r < 0 || r >= n) { ok = 0; break; }
            WALKED()
            int64_t s2 = s[r] * 2, e2 = end2(s[r], d[r]);
            while (hl && heap[0] <= s2) heap_pop(heap, &hl);
            int dd = hl > MAX_DEPTH ? MAX_DEPTH : (int)hl;
            depth[r] = (int16_t)dd;
            heap_push(heap, &hl, e2);
            /* depths rise by at most one per row, so depth dd - 1 has been seen */
            if (dd > top) { top = dd; last[dd] = INT64_MAX; }
            if (dd && e2 > last[dd - 1]) crossing = 1;
            last[dd] = e2;
        }
        if (ok && released && top && crossing) {
            npy_intp sp = 0;
            top = 0;
            for (npy_intp i = a; i < z; i++) {
                int32_t r = o[i];
                WALKED()
                int64_t s2 = s[r] * 2;
                while (sp && heap[sp - 1] <= s2) sp--;
                int dd = sp > MAX_DEPTH ? MAX_DEPTH : (int)sp;
                depth[r] = (int16_t)dd;
                if (dd > top) top = dd;
                heap[sp++] = end2(s[r], d[r]);
            }
        }
        max_depth[k] = top;
    }
    Py_END_ALLOW_THREADS
    free(heap);
    free(last);
    if (!released) return NULL;
    if (!ok) goto bad;
    Py_RETURN_NONE;
bad:
    PyErr_SetString(PyExc_ValueError, "_trace_build.depths: order or bounds out of range");
    return NULL;
}

static int cmp_i32(const void *x, const void *y) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

typedef struct {
    int32_t *rows;
    npy_intp len, cap;
} buf_t;

static int buf_add(buf_t *bf, int32_t v) {
    if (bf->len == bf->cap) {
        npy_intp cap = bf->cap ? bf->cap * 2 : 4096;
        int32_t *p = realloc(bf->rows, sizeof(int32_t) * cap);
        if (!p) return 0;
        bf->rows = p;
        bf->cap = cap;
    }
    bf->rows[bf->len++] = v;
    return 1;
}

/* tiers(order int32[n], bounds int64[ntracks+1], max_depth int64[ntracks], depth int16[n] or int8[n],
 *       rank int32[n] or None (the identity), start_s int64[n], level_s int8[n], zs tuple of ints,
 *       count_only, mask uint32[n] (out, optional; None: none), release (optional))
 *   -> list of int32 arrays, one per z: index rows (count_only: list of their lengths,
 *      nothing collected, so the caller picks the tiers worth keeping first; with
 *      ``mask``, bit j of mask[index row] is set where tier j picks the row, for
 *      tier_merge, which then collects the kept tiers sorted by start)
 * ``order``/``bounds``/``depth`` are trace_index._depths' (rows of the reader's order, by
 * track, start, longest first); ``rank`` maps those rows to index rows, whose start and
 * level are ``start_s``/``level_s``. Tier z holds, of the events at levels < z, the first
 * in every (track, depth, 2^z bin) taking events by (track, depth, start, index row):
 * trace_index._build_tiers' picks, for all tiers in one pass, in that order (the caller
 * sorts them by start). ``release``: called once the order and depths are read and every
 * TIERS_RELEASE_ROWS rows of the walk by (track, depth, start) after (the saved order and the
 * starts are mapped: 156 MiB of jax308's tiers step otherwise). */
static PyObject *tiers(PyObject *self, PyObject *args) {
    PyArrayObject *ord, *bnd, *mx, *dep, *st, *lv;
    PyObject *zs, *rk_obj;
    PyObject *mk_obj = NULL;
    PyObject *release = NULL;
    int count_only;
    if (!PyArg_ParseTuple(args, "O!O!O!O!OO!O!O!p|OO", &PyArray_Type, &ord, &PyArray_Type, &bnd, &PyArray_Type, &mx,
                          &PyArray_Type, &dep, &rk_obj, &PyArray_Type, &st, &PyArray_Type, &lv,
                          &PyTuple_Type, &zs, &count_only, &mk_obj, &release))
        return NULL;
    /* mask None: no mask, but a release (the preview's picks, collected from mapped starts) */
    PyArrayObject *mk = mk_obj == NULL || mk_obj == Py_None ? NULL : (PyArrayObject *)mk_obj;
    if (mk != NULL && !PyArray_Check(mk_obj)) {
        PyErr_SetString(PyExc_TypeError, "_trace_build.tiers: mask must be an array or None");
        return NULL;
    }
    npy_intp n = PyArray_SIZE(st), nt = PyArray_SIZE(mx), nz = PyTuple_GET_SIZE(zs);
    /* rank None: the rows are their own index rows (the preview's picks, in reader order) */
    PyArrayObject *rk = rk_obj == Py_None ? NULL : (PyArrayObject *)rk_obj;
    if (rk != NULL && !PyArray_Check(rk_obj)) {
        PyErr_SetString(PyExc_TypeError, "_trace_build.tiers: rank must be an array or None");
        return NULL;
    }
    if (!check(ord, NPY_INT32, n, "order") || !check(bnd, NPY_INT64, nt + 1, "bounds") ||
        !check(mx, NPY_INT64, nt, "max_depth") ||
        !check(dep, PyArray_TYPE(dep) == NPY_INT8 ? NPY_INT8 : NPY_INT16, n, "depth") ||
        (rk != NULL && !check(rk, NPY_INT32, n, "rank")) ||
        !check(st, NPY_INT64, n, "start_s") || !check(lv, NPY_INT8, n, "level_s") ||
        (mk != NULL && (!check(mk, NPY_UINT32, n, "mask") || !writable(mk, "mask"))))
        return NULL;
    if (mk != NULL && (!count_only || nz > 32)) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.tiers: a mask is for counting up to 32 tiers");
        return NULL;
    }
    uint32_t *mask = mk != NULL ? PyArray_DATA(mk) : NULL;
    if (nz > 64) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.tiers: too many tiers");
        return NULL;
    }
    int zv[64];
    for (npy_intp j = 0; j < nz; j++) {
        long v = PyLong_AsLong(PyTuple_GET_ITEM(zs, j));
        if (v == -1 && PyErr_Occurred()) return NULL;
        if (v < 0 || v > 63 || (j && v <= zv[j - 1])) {
            PyErr_SetString(PyExc_ValueError, "_trace_build.tiers: tiers must be increasing, in [0, 63]");
            return NULL;
        }
        zv[j] = (int)v;
    }
    const int32_t *o = PyArray_DATA(ord), *rank = rk != NULL ? PyArray_DATA(rk) : NULL;
    const int64_t *b = PyArray_DATA(bnd), *maxd = PyArray_DATA(mx), *start = PyArray_DATA(st);
    /* int8 as the index saves it (no int16 copy: 26 MiB of jax308's tiers step), or int16 */
    const int8_t *depth8 = PyArray_TYPE(dep) == NPY_INT8 ? PyArray_DATA(dep) : NULL;
    const int16_t *depth16 = PyArray_DATA(dep);
#define DEPTH(r) (depth8 ? (int)depth8[r] : (int)depth16[r])
    const int8_t *level = PyArray_DATA(lv);
    if (b[0] != 0 || b[nt] != n) goto bad_input;
    npy_intp nkeys = 0;
    for (npy_intp k = 0; k < nt; k++) {
        if (b[k + 1] < b[k] || maxd[k] < 0 || maxd[k] > MAX_DEPTH) goto bad_input;
        nkeys += maxd[k] + 1;
    }
    /* the first tier index with z > level, per level */
    int first_z[128];
    for (int l = -64; l < 64; l++) {
        int j = 0;
        while (j < nz && zv[j] <= l) j++;
        first_z[l + 64] = j;
    }
    int64_t *pos = calloc(nkeys + 1, sizeof(int64_t));
    int64_t *base = malloc(sizeof(int64_t) * (nt ? nt : 1));
    int32_t *trav = malloc(sizeof(int32_t) * (n ? n : 1));
    buf_t out[64];
    npy_intp counts[64];
    memset(out, 0, sizeof out);
    memset(counts, 0, sizeof counts);
    if (!pos || !base || !trav) {
        free(pos);
        free(base);
        free(trav);
        return PyErr_NoMemory();
    }
    int ok = 1, mem = 1, released = 1;
    npy_intp walked = 0;
    Py_BEGIN_ALLOW_THREADS
    /* rows by (track, depth), keeping their (start, longest first) order: a counting sort
     * on key base[track] + depth */
    npy_intp acc = 0;
    for (npy_intp k = 0; k < nt; k++) { base[k] = acc; acc += maxd[k] + 1; }
    for (npy_intp k = 0; k < nt && ok; k++) {
        for (npy_intp i = b[k]; i < b[k + 1]; i++) {
            int32_t r = o[i];
            if (r < 0 || r >= n || DEPTH(r) < 0 || DEPTH(r) > maxd[k]) { ok = 0; break; }
            pos[base[k] + DEPTH(r) + 1]++;
        }
    }
    if (ok) {
        for (npy_intp q = 0; q < nkeys; q++) pos[q + 1] += pos[q];
        for (npy_intp k = 0; k < nt; k++)
            for (npy_intp i = b[k]; i < b[k + 1]; i++) {
                int32_t r = o[i];
                int32_t row = rank != NULL ? rank[r] : r;
                if (row < 0 || row >= n) { ok = 0; break; }
                trav[pos[base[k] + DEPTH(r)]++] = row;
            }
    }
    /* pos[q] is now the end of group q (the start of q + 1); the order and the depths are
     * read no more: let go */
    if (ok && release) {
        Py_BLOCK_THREADS
        released = call_release(release);
        Py_UNBLOCK_THREADS
    }
    npy_intp g0 = 0;
    for (npy_intp q = 0; q < nkeys && ok && mem && released; q++) {
        npy_intp g1 = pos[q];
        /* events with one start on one (track, depth) only meet where depths are capped:
         * there the index row decides, as in _build_tiers' stable sorts */
        for (npy_intp i = g0; i + 1 < g1;) {
            WALKED_EVERY(TIERS_RELEASE_ROWS)
            npy_intp j = i + 1;
            while (j < g1 && start[trav[j]] == start[trav[i]]) j++;
            if (j - i > 1) qsort(trav + i, (size_t)(j - i), sizeof(int32_t), cmp_i32);
            i = j;
        }
        int64_t last[64];
        for (npy_intp j = 0; j < nz; j++) last[j] = -1;
        for (npy_intp i = g0; i < g1 && mem && ok && released; i++) {
            WALKED_EVERY(TIERS_RELEASE_ROWS)
            int32_t row = trav[i];
            int64_t sv = start[row];
            int lvl = level[row];
            if (lvl < -64 || lvl > 63) { ok = 0; break; }
            /* Finest tier first. last[j] is the bin of the last row tier j saw; where this
             * row's bin is that one, so is it at every coarser tier: the rows come by start,
             * the last row a coarser tier saw lies between that row and this one, and bins
             * nest. So the first tier that does not pick the row ends its tiers (jax308: ~12
             * tiers per row before, ~2 now). */
            for (int j = first_z[lvl + 64]; j < nz; j++) {
                int64_t bin = sv >> zv[j];  /* starts are >= 0 (shifted by the first) */
                if (bin == last[j]) break;
                last[j] = bin;
                counts[j]++;
                if (mask) mask[row] |= (uint32_t)1 << j;
                if (!count_only && !buf_add(&out[j], row)) { mem = 0; break; }
            }
        }
        g0 = g1;
    }
    Py_END_ALLOW_THREADS
#undef DEPTH
    free(pos);
    free(base);
    free(trav);
    PyObject *res = NULL;
    if (!released) goto done;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.tiers: order, depth or rank out of range");
        goto done;
    }
    if (!mem) {
        PyErr_NoMemory();
        goto done;
    }
    res = PyList_New(nz);
    if (!res) goto done;
    for (npy_intp j = 0; j < nz && count_only; j++) {
        PyObject *c = PyLong_FromSsize_t(counts[j]);
        if (!c) {
            Py_CLEAR(res);
            goto done;
        }
        PyList_SET_ITEM(res, j, c);
    }
    for (npy_intp j = 0; j < nz && !count_only; j++) {
        npy_intp len = out[j].len;
        PyArrayObject *a = (PyArrayObject *)PyArray_EMPTY(1, &len, NPY_INT32, 0);
        if (!a) {
            Py_CLEAR(res);
            goto done;
        }
        if (len) memcpy(PyArray_DATA(a), out[j].rows, sizeof(int32_t) * len);
        PyList_SET_ITEM(res, j, (PyObject *)a);
    }
done:
    for (npy_intp j = 0; j < nz; j++) free(out[j].rows);
    return res;
bad_input:
    PyErr_SetString(PyExc_ValueError, "_trace_build.tiers: bounds or depths out of range");
    return NULL;
}

/* A row's int value in a column stored as any of the index's integer dtypes. */
static inline int64_t at_int(const void *p, int type, npy_intp i) {
    switch (type) {
    case NPY_INT8: return ((const int8_t *)p)[i];
    case NPY_UINT8: return ((const uint8_t *)p)[i];
    case NPY_INT16: return ((const int16_t *)p)[i];
    case NPY_UINT16: return ((const uint16_t *)p)[i];
    case NPY_INT32: return ((const int32_t *)p)[i];
    default: return ((const int64_t *)p)[i];
    }
}

/* one row of a group of equal starts, with its sort key: the key travels with the row
 * because qsort's comparator has no context argument (a static holding the columns was
 * shared by every thread calling tier_merge without the GIL, and by a tier_merge called
 * from another's ``release``) */
typedef struct { int64_t track, depth; int32_t row; } tie_t;

static int cmp_tie(const void *x, const void *y) {
    const tie_t *a = x, *b = y;
    if (a->track != b->track) return (a->track > b->track) - (a->track < b->track);
    if (a->depth != b->depth) return (a->depth > b->depth) - (a->depth < b->depth);
    return (a->row > b->row) - (a->row < b->row);
}

/* tier_merge(mask uint32[n], keep uint32, counts int64[nz], bounds int64[L+1], start_s int64[n],
 *            track_s int[n], depth_s int[n][, release]) -> list of int32 arrays (the kept
 *            tiers j, bit j of ``keep``, in order of j)
 * The kept tiers' rows (``tiers``' mask: bit j of mask[row] where tier j picks the row),
 * each sorted by start as trace_index._build_tiers sorted them: a stable sort by start of
 * the rows in ``tiers``' walk order, that is by (start, track, depth, row). Index rows are
 * by duration level, each level by start (``bounds``), so one merge of the levels' runs by
 * start gives every tier in that order at once (the rows of one start are put in (track,
 * depth, row) order: ``track_s``/``depth_s`` are the index's columns), instead of a second
 * walk collecting the rows and a sort per tier (0.7 s of jax308's 1.2 s of tiers).
 * ``counts`` are the tiers' sizes ``tiers`` counted: the arrays are made that long, and a
 * row beyond them raises. ``release``: called every RELEASE_ROWS rows merged (the starts
 * mapped: each level's cursor moves forward, so the pages behind it are read no more). */
static PyObject *tier_merge(PyObject *self, PyObject *args) {
    PyArrayObject *mk, *cn, *bn, *st, *tr, *dp;
    unsigned long keep;
    PyObject *release = NULL;
    if (!PyArg_ParseTuple(args, "O!kO!O!O!O!O!|O", &PyArray_Type, &mk, &keep, &PyArray_Type, &cn, &PyArray_Type, &bn,
                          &PyArray_Type, &st, &PyArray_Type, &tr, &PyArray_Type, &dp, &release))
        return NULL;
    npy_intp n = PyArray_SIZE(mk), nz = PyArray_SIZE(cn), nl = PyArray_SIZE(bn) - 1;
    int tt = PyArray_TYPE(tr), dt = PyArray_TYPE(dp);
    int int_ok = (tt == NPY_INT8 || tt == NPY_UINT8 || tt == NPY_INT16 || tt == NPY_UINT16 || tt == NPY_INT32 ||
                  tt == NPY_INT64) &&
                 (dt == NPY_INT8 || dt == NPY_UINT8 || dt == NPY_INT16 || dt == NPY_UINT16 || dt == NPY_INT32 ||
                  dt == NPY_INT64);
    if (!check(mk, NPY_UINT32, n, "mask") || !check(cn, NPY_INT64, -1, "counts") || !check(bn, NPY_INT64, -1, "bounds") ||
        !check(st, NPY_INT64, n, "start_s") || !check(tr, tt, n, "track_s") || !check(dp, dt, n, "depth_s"))
        return NULL;
    if (!int_ok || nz > 32 || nl < 1 || nl > 64 || n >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.tier_merge: bad dtypes or sizes");
        return NULL;
    }
    const uint32_t *mask = PyArray_DATA(mk);
    const int64_t *counts = PyArray_DATA(cn), *b = PyArray_DATA(bn), *start = PyArray_DATA(st);
    if (b[0] != 0 || b[nl] > n) goto bad;  /* the levels past the last kept tier are left out */
    for (npy_intp l = 0; l < nl; l++)
        if (b[l + 1] < b[l]) goto bad;
    keep &= nz >= 32 ? 0xffffffffUL : ((1UL << nz) - 1);
    PyObject *res = PyList_New(0);
    if (!res) return NULL;
    int32_t *dst[32] = {0};
    npy_intp fill[32] = {0}, cap[32] = {0};
    for (npy_intp j = 0; j < nz; j++) {
        if (!(keep >> j & 1)) continue;
        npy_intp len = counts[j];
        if (len < 0) { Py_DECREF(res); goto bad; }
        PyArrayObject *a = (PyArrayObject *)PyArray_EMPTY(1, &len, NPY_INT32, 0);
        if (!a || PyList_Append(res, (PyObject *)a) < 0) {
            Py_XDECREF(a);
            Py_DECREF(res);
            return NULL;
        }
        Py_DECREF(a);
        dst[j] = PyArray_DATA(a);
        cap[j] = len;
    }
    /* a heap of the levels' runs (their next picked row), by start then level */
    npy_intp cur[64], heap[64], hn = 0;
    tie_t *group = NULL;
    npy_intp gcap = 0;
    int ok = 1, mem = 1, released = 1;
    npy_intp walked = 0;
    const void *track_s = PyArray_DATA(tr), *depth_s = PyArray_DATA(dp);
    Py_BEGIN_ALLOW_THREADS
#define SKIP(l) while (cur[l] < b[(l) + 1] && !(mask[cur[l]] & keep)) cur[l]++
#define LESS(x, y) (start[cur[x]] < start[cur[y]] || (start[cur[x]] == start[cur[y]] && (x) < (y)))
    for (npy_intp l = 0; l < nl; l++) {
        cur[l] = b[l];
        SKIP(l);
        if (cur[l] < b[l + 1]) {
            npy_intp i = hn++;
            while (i > 0 && LESS(l, heap[(i - 1) / 2])) { heap[i] = heap[(i - 1) / 2]; i = (i - 1) / 2; }
            heap[i] = l;
        }
    }
    npy_intp glen = 0;
    int64_t gstart = 0;
    while (ok && mem && (hn || glen)) {
        int32_t row = -1;
        if (++walked % RELEASE_ROWS == 0 && release) {  /* the caller's release, with the GIL */
            Py_BLOCK_THREADS
            released = call_release(release);
            Py_UNBLOCK_THREADS
            if (!released) break;
        }
        if (hn) {
            npy_intp l = heap[0];
            row = (int32_t)cur[l];
            cur[l]++;
            SKIP(l);
            if (cur[l] >= b[l + 1]) l = heap[--hn];
            /* sift down heap[0] := l */
            npy_intp i = 0;
            for (;;) {
                npy_intp c = 2 * i + 1;
                if (c >= hn) break;
                if (c + 1 < hn && LESS(heap[c + 1], heap[c])) c++;
                if (!LESS(heap[c], l)) break;
                heap[i] = heap[c];
                i = c;
            }
            if (hn) heap[i] = l;
        }
        /* rows of one start are emitted together, in (track, depth, row) order */
        if (glen && (row < 0 || start[row] != gstart)) {
            if (glen > 1) {  /* (most starts are one row's: their keys are never read) */
                for (npy_intp g = 0; g < glen; g++) {
                    group[g].track = at_int(track_s, tt, group[g].row);
                    group[g].depth = at_int(depth_s, dt, group[g].row);
                }
                qsort(group, (size_t)glen, sizeof(tie_t), cmp_tie);
            }
            for (npy_intp g = 0; g < glen && ok; g++) {
                uint32_t bits = mask[group[g].row] & keep;
                while (bits) {
                    int j = __builtin_ctz(bits);
                    bits &= bits - 1;
                    if (fill[j] >= cap[j]) { ok = 0; break; }
                    dst[j][fill[j]++] = group[g].row;
                }
            }
            glen = 0;
        }
        if (row >= 0) {
            if (glen == gcap) {
                npy_intp c2 = gcap ? 2 * gcap : 64;
                tie_t *p = realloc(group, sizeof(tie_t) * c2);
                if (!p) { mem = 0; break; }
                group = p;
                gcap = c2;
            }
            group[glen++].row = row;
            gstart = start[row];
        }
    }
#undef SKIP
#undef LESS
    Py_END_ALLOW_THREADS
    free(group);
    if (!released) {
        Py_DECREF(res);
        return NULL;
    }
    for (npy_intp j = 0; j < nz && ok; j++)
        if (fill[j] != cap[j]) ok = 0;
    if (!mem) {
        Py_DECREF(res);
        return PyErr_NoMemory();
    }
    if (!ok) {
        Py_DECREF(res);
        goto bad;
    }
    return res;
bad:
    PyErr_SetString(PyExc_ValueError, "_trace_build.tier_merge: bounds, counts or mask do not agree");
    return NULL;
}

/* zoom_level(order int32 or int64[n], seg int64[m+1], start int64[N], dur int64[N], level int8[N],
 *            flow_of int64[N], visible int64[v] (sorted), k, r, one_is_zero=False) -> None
 * One of XProf's zoom levels (trace_visibility.ZoomLevels._level, its Python twin): per
 * row of the events (``order``'s stretches seg[j]..seg[j+1], each in (start, longest
 * first) order), with RowVisibility's stack of kept ends, an event not kept at a coarser
 * level (level[row] >= k) is kept at level k when it lasts at least r, or is the first
 * kept at its depth, or starts r or more after the last kept end at its depth; a flow's
 * slice (flow_of >= 0) when its flow is in ``visible`` or it lasts at least r. Kept rows
 * get level k; every kept event (at this level or a coarser one) updates the stack.
 * ``one_is_zero``: a 1 ps duration is read as 0 (an xplane's zero-length events, stored
 * 1 ps long: trace_index.TraceIndex._rule_durations), so the index's own column is read
 * in place rather than a mapped copy of it. */
/* RowVisibility's stack of kept ends, and its Depth: the first depth whose kept end is at
 * or before ``begin``. XProf scans the stack from the bottom (``RowVisibility::Depth``),
 * which is quadratic when events nest deep (a trace of 600,000 identical nested events
 * kept it busy for minutes). Here each end is stored clamped to the one below it
 * (min(end, stack[depth - 1])), so the stack never rises and the first end <= begin is
 * found by binary search. The answer is the same: a clamped entry is <= begin exactly
 * when some entry at or below it is, so the first one found is the first unclamped one,
 * and at that depth the clamped and the real end are equal (the one below is > begin
 * >= it), which is the end the rule compares. */
static inline npy_intp kept_depth(const int64_t *stack, npy_intp sp, int64_t begin) {
    if (sp == 0 || stack[0] <= begin) return 0;  /* the common case: after every kept end */
    npy_intp lo = 1, hi = sp;
    while (lo < hi) {
        npy_intp m = lo + (hi - lo) / 2;
        if (stack[m] <= begin) hi = m; else lo = m + 1;
    }
    return lo;
}

/* The end kept at ``depth`` (the stack truncated there first), clamped as kept_depth needs. */
static inline int64_t clamped_end(const int64_t *stack, npy_intp depth, int64_t end) {
    return depth > 0 && stack[depth - 1] < end ? stack[depth - 1] : end;
}

static int in_sorted(const int64_t *v, npy_intp nv, int64_t x) {
    npy_intp lo = 0, hi = nv;
    while (lo < hi) {
        npy_intp m = lo + (hi - lo) / 2;
        if (v[m] < x) lo = m + 1; else hi = m;
    }
    return lo < nv && v[lo] == x;
}

static PyObject *zoom_level(PyObject *self, PyObject *args) {
    PyArrayObject *ord, *sg, *st, *du, *lv, *fo, *vi;
    int k, one_is_zero = 0;
    long long r;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!iL|p", &PyArray_Type, &ord, &PyArray_Type, &sg, &PyArray_Type, &st,
                          &PyArray_Type, &du, &PyArray_Type, &lv, &PyArray_Type, &fo, &PyArray_Type, &vi, &k, &r,
                          &one_is_zero))
        return NULL;
    npy_intp n = PyArray_SIZE(ord), N = PyArray_SIZE(st), m1 = PyArray_SIZE(sg), nv = PyArray_SIZE(vi);
    /* the order is the index build's own (trace_index.XPROF_ORDER_FILE: int32, memory-mapped)
     * or a lexsort's (int64) */
    int o32 = PyArray_TYPE(ord) == NPY_INT32;
    if (!check(ord, o32 ? NPY_INT32 : NPY_INT64, n, "order") || !check(sg, NPY_INT64, -1, "seg") || !check(st, NPY_INT64, N, "start") ||
        !check(du, NPY_INT64, N, "dur") || !check(lv, NPY_INT8, N, "level") || !writable(lv, "level") ||
        !check(fo, NPY_INT64, N, "flow_of") || !check(vi, NPY_INT64, nv, "visible"))
        return NULL;
    const int64_t *o = PyArray_DATA(ord), *seg = PyArray_DATA(sg), *start = PyArray_DATA(st), *dur = PyArray_DATA(du);
    const int32_t *o4 = PyArray_DATA(ord);
    const int64_t *flow = PyArray_DATA(fo), *vis = PyArray_DATA(vi);
    int8_t *level = PyArray_DATA(lv);
    if (m1 < 1 || seg[0] != 0 || seg[m1 - 1] != n) goto bad_input;
    for (npy_intp j = 0; j + 1 < m1; j++)
        if (seg[j + 1] < seg[j]) goto bad_input;
    npy_intp cap = 64, sp;
    int64_t *stack = malloc(sizeof(int64_t) * cap);
    if (!stack) return PyErr_NoMemory();
    int ok = 1, mem = 1;
    Py_BEGIN_ALLOW_THREADS
    for (npy_intp j = 0; j + 1 < m1 && ok && mem; j++) {
        sp = 0;
        for (npy_intp i = seg[j]; i < seg[j + 1]; i++) {
            int64_t row = o32 ? (int64_t)o4[i] : o[i];
            if (row < 0 || row >= N) { ok = 0; break; }
            int64_t b = start[row], d = dur[row];
            if (one_is_zero && d == 1) d = 0;
            npy_intp depth = kept_depth(stack, sp, b);
            if (level[row] < k) {
                /* kept at a coarser level: kept here too */
            } else if (flow[row] >= 0) {
                if (!(d >= r || in_sorted(vis, nv, flow[row]))) continue;
                level[row] = (int8_t)k;
            } else if (d >= r || depth >= sp || b - stack[depth] >= r) {
                level[row] = (int8_t)k;
            } else {
                continue;
            }
            sp = depth;
            if (sp == cap) {
                int64_t *a = realloc(stack, sizeof(int64_t) * cap * 2);
                if (!a) { mem = 0; break; }
                stack = a;
                cap *= 2;
            }
            stack[sp] = clamped_end(stack, sp, b + d);
            sp++;
        }
    }
    Py_END_ALLOW_THREADS
    free(stack);
    if (!mem) return PyErr_NoMemory();
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.zoom_level: order out of range");
        return NULL;
    }
    Py_RETURN_NONE;
bad_input:
    PyErr_SetString(PyExc_ValueError, "_trace_build.zoom_level: bad stretches");
    return NULL;
}

/* zoom_levels(order int32 or int64[n], seg int64[m+1], start int64[N], dur int64[N] or uint32[N],
 *             dur_tail int64[T], level int8[N], flow_rows int64[F] (sorted), flow_dense int32[F],
 *             visible tuple of uint8 arrays [nflows], k0, rs tuple of ints, one_is_zero=False,
 *             release=None) -> None
 * zoom_level for the levels k0, k0 + 1, ... (one per ``visible``/``rs`` entry) in one walk
 * of the order: each level keeps its own stack of kept ends, and a row is decided at every
 * level in turn, so a level reads the row's level as the passes before it left it (a row
 * kept at k0 is kept at k0 + 1 as "kept at a coarser level"), which is all that one level
 * takes from another; the answer is that of zoom_level called level by level, with the
 * flows numbered densely (``flow_dense``: each flow row's number, 0..nflows-1, as the flow
 * pre-pass numbers them) and each level's visible flows as a byte per flow (``visible``),
 * read in place of zoom_level's binary search of the visible ids per flow row. The walk
 * reads each row's start and duration once for all the levels instead of once per level:
 * random reads (the order is by track and start, the columns by duration level and start),
 * most of the passes' time on jax308's 13.6 M rows.
 * Read as the index stores them, so that no whole-trace copy is made for the walk (218 MB
 * on jax308, the zoom levels' worker's peak): the durations as uint32 with the last T rows'
 * in ``dur_tail`` (trace_index.DUR_TAIL_FILE; an int64 column takes T = 0), and each row's
 * flow from the flow-bound rows: a bit per row marks them and a count per 64 rows gives a
 * marked row's place among them (a rank), or where a row is listed twice, a binary search
 * for its last entry (zoom_level's ``flow_of[rows] = ids`` keeps the last). ``release``:
 * called every WALK_RELEASE_ROWS rows walked (the order, starts and durations mapped: a stretch
 * of the walk, one track's rows in start order, reads each duration level's rows of one
 * stretch of time, so the pages it left behind are let go there). */
#define MAX_FUSED 16
static PyObject *zoom_levels(PyObject *self, PyObject *args) {
    PyArrayObject *ord, *sg, *st, *du, *dt, *lv, *fr, *fi;
    PyObject *vis_t, *rs_t;
    int k0, one_is_zero = 0;
    PyObject *release = NULL;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!O!O!iO!|pO", &PyArray_Type, &ord, &PyArray_Type, &sg, &PyArray_Type, &st,
                          &PyArray_Type, &du, &PyArray_Type, &dt, &PyArray_Type, &lv, &PyArray_Type, &fr,
                          &PyArray_Type, &fi, &PyTuple_Type, &vis_t, &k0, &PyTuple_Type, &rs_t, &one_is_zero, &release))
        return NULL;
    npy_intp n = PyArray_SIZE(ord), N = PyArray_SIZE(st), m1 = PyArray_SIZE(sg), T = PyArray_SIZE(dt);
    npy_intp nflows = -1;
    npy_intp F = PyArray_SIZE(fr), K = PyTuple_GET_SIZE(vis_t);
    int o32 = PyArray_TYPE(ord) == NPY_INT32, d32 = PyArray_TYPE(du) == NPY_UINT32;
    if (!check(ord, o32 ? NPY_INT32 : NPY_INT64, n, "order") || !check(sg, NPY_INT64, -1, "seg") ||
        !check(st, NPY_INT64, N, "start") || !check(du, d32 ? NPY_UINT32 : NPY_INT64, N, "dur") ||
        !check(dt, NPY_INT64, T, "dur_tail") || !check(lv, NPY_INT8, N, "level") || !writable(lv, "level") ||
        !check(fr, NPY_INT64, F, "flow_rows") || !check(fi, NPY_INT32, F, "flow_dense"))
        return NULL;
    if (K < 1 || K > MAX_FUSED || PyTuple_GET_SIZE(rs_t) != K || k0 < 0 || k0 + K > 127 || T > N || (T && !d32)) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.zoom_levels: bad levels or durations");
        return NULL;
    }
    const uint8_t *vis[MAX_FUSED];
    int64_t rs[MAX_FUSED];
    for (npy_intp j = 0; j < K; j++) {
        PyObject *v = PyTuple_GET_ITEM(vis_t, j);
        if (!PyArray_Check(v) || !check((PyArrayObject *)v, NPY_UINT8, nflows, "visible")) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "_trace_build.zoom_levels: visible must be arrays");
            return NULL;
        }
        vis[j] = PyArray_DATA((PyArrayObject *)v);
        nflows = PyArray_SIZE((PyArrayObject *)v);  /* every level's as long as the first's */
        rs[j] = PyLong_AsLongLong(PyTuple_GET_ITEM(rs_t, j));
        if (rs[j] == -1 && PyErr_Occurred()) return NULL;
    }
    const int64_t *o = PyArray_DATA(ord), *seg = PyArray_DATA(sg), *start = PyArray_DATA(st);
    const int64_t *dur = PyArray_DATA(du), *tail = PyArray_DATA(dt);
    const uint32_t *dur32 = PyArray_DATA(du);
    const int32_t *o4 = PyArray_DATA(ord);
    const int64_t *frows = PyArray_DATA(fr);
    const int32_t *fids = PyArray_DATA(fi);
    int8_t *level = PyArray_DATA(lv);
    npy_intp at = N - T;
    if (m1 < 1 || seg[0] != 0 || seg[m1 - 1] != n) goto bad_input;
    for (npy_intp j = 0; j + 1 < m1; j++)
        if (seg[j + 1] < seg[j]) goto bad_input;
    for (npy_intp j = 0; j < F; j++)
        if (frows[j] < 0 || frows[j] >= N || (j && frows[j] < frows[j - 1]) || fids[j] < 0 || fids[j] >= nflows)
            goto bad_input;
    int64_t *stack[MAX_FUSED] = {0};
    npy_intp cap[MAX_FUSED], sp[MAX_FUSED];
    int ok = 1, mem = 1, released = 1;
    npy_intp walked = 0;
    uint64_t *is_flow = calloc((size_t)N / 64 + 1, sizeof(uint64_t));
    int32_t *before = malloc(sizeof(int32_t) * ((size_t)N / 64 + 1));  /* flow rows in the words before */
    int twice = 0;
    if (!is_flow || !before) mem = 0;
    for (npy_intp j = 0; j < K; j++) {
        cap[j] = 64;
        stack[j] = malloc(sizeof(int64_t) * cap[j]);
        if (!stack[j]) mem = 0;
    }
    if (mem) {
        Py_BEGIN_ALLOW_THREADS
        for (npy_intp j = 0; j < F; j++) {
            is_flow[frows[j] >> 6] |= (uint64_t)1 << (frows[j] & 63);
            if (j && frows[j] == frows[j - 1]) twice = 1;
        }
        int32_t acc = 0;
        for (npy_intp w = 0; w <= N / 64; w++) {
            before[w] = acc;
            acc += (int32_t)__builtin_popcountll(is_flow[w]);
        }
        for (npy_intp s = 0; s + 1 < m1 && ok && mem && released; s++) {
            for (npy_intp j = 0; j < K; j++) sp[j] = 0;
            for (npy_intp i = seg[s]; i < seg[s + 1] && mem; i++) {
                if (++walked % WALK_RELEASE_ROWS == 0 && release) {  /* the caller's release, with the GIL */
                    Py_BLOCK_THREADS
                    released = call_release(release);
                    Py_UNBLOCK_THREADS
                    if (!released) break;
                }
                int64_t row = o32 ? (int64_t)o4[i] : o[i];
                if (row < 0 || row >= N) { ok = 0; break; }
                int64_t b = start[row];
                int64_t d = !d32 ? dur[row] : row >= at ? tail[row - at] : (int64_t)dur32[row];
                int64_t f = -1;
                uint64_t word = is_flow[row >> 6], bit = (uint64_t)1 << (row & 63);
                if (word & bit) {
                    if (!twice) {
                        f = fids[before[row >> 6] + __builtin_popcountll(word & (bit - 1))];
                    } else {  /* the last of its entries */
                        npy_intp lo = 0, hi = F;
                        while (lo < hi) {
                            npy_intp mid = lo + (hi - lo) / 2;
                            if (frows[mid] <= row) lo = mid + 1; else hi = mid;
                        }
                        f = fids[lo - 1];
                    }
                }
                if (one_is_zero && d == 1) d = 0;
                for (npy_intp j = 0; j < K; j++) {
                    int k = k0 + (int)j;
                    int64_t r = rs[j];
                    npy_intp depth = kept_depth(stack[j], sp[j], b);
                    if (level[row] < k) {
                        /* kept at a coarser level: kept here too */
                    } else if (f >= 0) {
                        if (!(d >= r || vis[j][f])) continue;
                        level[row] = (int8_t)k;
                    } else if (d >= r || depth >= sp[j] || b - stack[j][depth] >= r) {
                        level[row] = (int8_t)k;
                    } else {
                        continue;
                    }
                    sp[j] = depth;
                    if (sp[j] == cap[j]) {
                        int64_t *a = realloc(stack[j], sizeof(int64_t) * cap[j] * 2);
                        if (!a) { mem = 0; break; }
                        stack[j] = a;
                        cap[j] *= 2;
                    }
                    stack[j][sp[j]] = clamped_end(stack[j], sp[j], b + d);
                    sp[j]++;
                }
            }
        }
        Py_END_ALLOW_THREADS
    }
    for (npy_intp j = 0; j < K; j++) free(stack[j]);
    free(is_flow);
    free(before);
    if (!released) return NULL;
    if (!mem) return PyErr_NoMemory();
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.zoom_levels: order out of range");
        return NULL;
    }
    Py_RETURN_NONE;
bad_input:
    PyErr_SetString(PyExc_ValueError, "_trace_build.zoom_levels: bad stretches or flow rows");
    return NULL;
}

/* flow_pass(idx int32[m], start int64[m], dur int64[m], track int32[m], flow int32[m],
 *           end_flow int8[m], level int8[L], ntracks, nflows, k, r) -> int8[nflows]
 * trace_visibility.ZoomLevels._flow_pass (its Python twin), CalculateFlowVisibilityLite
 * at level k over the flow slices in XProf's global order (``idx`` their positions in
 * ``level``; track and flow ids made dense, 0..ntracks-1 / 0..nflows-1): per track the
 * stack of kept ends and the last kept arrow end, per flow whether it is visible while
 * open; returns per flow the first visibility it got (-1: no slice seen).
 * An event of flow -1 is bound to no flow: the rule alone decides it, and it leaves the
 * flows and the last arrow end alone. With every level NOT_YET and k = 0 this is
 * VisibleAtResolution with a fresh state over a window's events
 * (trace_visibility.keep_mask: the kept ones get level 0). Positions, tracks and flows
 * are int32 (numbered densely; the index's rows are int32 too, XPROF_ORDER_FILE): jax308's
 * 2.4 M flow slices held them as int64, 29 MB more in the zoom levels' worker. */
typedef struct { int64_t *v; npy_intp n, cap; int64_t last; int has_last; } row_t;

static PyObject *flow_pass(PyObject *self, PyObject *args) {
    PyArrayObject *ix, *st, *du, *tr, *fl, *ef, *lv;
    Py_ssize_t ntracks, nflows;
    int k;
    long long r;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!nniL", &PyArray_Type, &ix, &PyArray_Type, &st, &PyArray_Type, &du,
                          &PyArray_Type, &tr, &PyArray_Type, &fl, &PyArray_Type, &ef, &PyArray_Type, &lv,
                          &ntracks, &nflows, &k, &r))
        return NULL;
    npy_intp m = PyArray_SIZE(ix), L = PyArray_SIZE(lv);
    if (!check(ix, NPY_INT32, m, "idx") || !check(st, NPY_INT64, m, "start") || !check(du, NPY_INT64, m, "dur") ||
        !check(tr, NPY_INT32, m, "track") || !check(fl, NPY_INT32, m, "flow") || !check(ef, NPY_INT8, m, "end_flow") ||
        !check(lv, NPY_INT8, L, "level") || !writable(lv, "level"))
        return NULL;
    if (ntracks < 0 || nflows < 0) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.flow_pass: bad sizes");
        return NULL;
    }
    npy_intp nf = nflows;
    PyArrayObject *out = (PyArrayObject *)PyArray_EMPTY(1, &nf, NPY_INT8, 0);
    int8_t *state = malloc(nflows ? nflows : 1);
    row_t *rows = calloc(ntracks ? ntracks : 1, sizeof(row_t));
    if (!out || !state || !rows) {
        Py_XDECREF(out);
        free(state);
        free(rows);
        return PyErr_NoMemory();
    }
    int8_t *res = PyArray_DATA(out);
    memset(res, -1, nflows);
    memset(state, -1, nflows ? nflows : 1);  /* -1: the flow is not open (TraceViewerVisibility::flows_) */
    const int64_t *start = PyArray_DATA(st), *dur = PyArray_DATA(du);
    const int32_t *idx = PyArray_DATA(ix), *track = PyArray_DATA(tr), *flow = PyArray_DATA(fl);
    const int8_t *end_flow = PyArray_DATA(ef);
    int8_t *level = PyArray_DATA(lv);
    int ok = 1, mem = 1;
    Py_BEGIN_ALLOW_THREADS
    for (npy_intp j = 0; j < m; j++) {
        int64_t i = idx[j], t = track[j], f = flow[j], b = start[j], d = dur[j];
        if (i < 0 || i >= L || t < 0 || t >= ntracks || f < -1 || f >= nflows) { ok = 0; break; }
        row_t *row = &rows[t];
        npy_intp depth = kept_depth(row->v, row->n, b);
        int visible;
        if (f < 0) {  /* no flow: the rule alone */
            visible = level[i] < k || d >= r || depth >= row->n || b - row->v[depth] >= r;
            if (visible && level[i] >= k) level[i] = (int8_t)k;
        } else if (level[i] < k) {  /* SetVisibleAtResolution */
            if (end_flow[j]) state[f] = -1;
            else if (state[f] < 0) state[f] = 1;
            visible = 1;
            if (res[f] < 0) res[f] = 1;
        } else {
            visible = d >= r || depth >= row->n || b - row->v[depth] >= r;
            int first = state[f] < 0;
            if (first) state[f] = (int8_t)visible;
            if (!visible) {
                /* XProf subtracts uint64 timestamps (span.end_ps() - last flow timestamp):
                   an arrow end before the row's last one (a nested slice) wraps around
                   and counts as far enough */
                if (first) state[f] = (int8_t)(!row->has_last || b + d < row->last || b + d - row->last >= r);
                visible = state[f];
            }
            if (end_flow[j]) state[f] = -1;
            if (visible) level[i] = (int8_t)k;
            if (res[f] < 0) res[f] = (int8_t)visible;
        }
        if (visible) {
            if (f >= 0) {
                row->last = b + d;
                row->has_last = 1;
            }
            row->n = depth;
            if (row->n == row->cap) {
                npy_intp cap = row->cap ? 2 * row->cap : 16;
                int64_t *a = realloc(row->v, sizeof(int64_t) * cap);
                if (!a) { mem = 0; break; }
                row->v = a;
                row->cap = cap;
            }
            row->v[row->n] = clamped_end(row->v, row->n, b + d);
            row->n++;
        }
    }
    Py_END_ALLOW_THREADS
    for (Py_ssize_t t = 0; t < ntracks; t++) free(rows[t].v);
    free(rows);
    free(state);
    if (!ok || !mem) {
        Py_DECREF(out);
        if (!mem) return PyErr_NoMemory();
        PyErr_SetString(PyExc_ValueError, "_trace_build.flow_pass: an index out of range");
        return NULL;
    }
    return (PyObject *)out;
}

/* shift_clip(start int64[n] (in place), dur int64[n] (in place), shift, max_dur, track int32[n],
 *            per_track int64[ntracks] (out, zeroed by the caller))
 *   -> (max end, whether some track id is outside [0, ntracks))
 * IndexWriter.finish's first pass over the raw columns, fused (numpy made a 109 MB
 * ``start + dur`` and an int64 copy of ``track`` for ``bincount`` on jax308, and read each
 * column once per step): starts shifted by ``shift``, durations clipped to [0, max_dur],
 * the largest start + dur (wrapping as numpy's int64 does), and the events per track (an
 * id out of range is not counted: the caller then counts with numpy, as before). */
static PyObject *shift_clip(PyObject *self, PyObject *args) {
    PyArrayObject *st, *du, *tr, *pt;
    long long shift, max_dur;
    if (!PyArg_ParseTuple(args, "O!O!LLO!O!", &PyArray_Type, &st, &PyArray_Type, &du, &shift, &max_dur,
                          &PyArray_Type, &tr, &PyArray_Type, &pt))
        return NULL;
    npy_intp n = PyArray_SIZE(st), nt = PyArray_SIZE(pt);
    if (!check(st, NPY_INT64, n, "start") || !check(du, NPY_INT64, n, "dur") || !check(tr, NPY_INT32, n, "track") ||
        !check(pt, NPY_INT64, nt, "per_track") || !writable(st, "start") || !writable(du, "dur") ||
        !writable(pt, "per_track"))
        return NULL;
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.shift_clip: no events");
        return NULL;
    }
    int64_t *s = PyArray_DATA(st), *d = PyArray_DATA(du), *cnt = PyArray_DATA(pt);
    const int32_t *t = PyArray_DATA(tr);
    int64_t mx = INT64_MIN;
    int outside = 0;
    Py_BEGIN_ALLOW_THREADS
    for (npy_intp i = 0; i < n; i++) {
        /* unsigned arithmetic: numpy's int64 wraps, C's signed overflow is undefined */
        int64_t sv = (int64_t)((uint64_t)s[i] - (uint64_t)shift);
        int64_t dv = d[i] < 0 ? 0 : d[i] > max_dur ? max_dur : d[i];
        s[i] = sv;
        d[i] = dv;
        int64_t e = (int64_t)((uint64_t)sv + (uint64_t)dv);
        if (e > mx) mx = e;
        int32_t ti = t[i];
        if (ti >= 0 && ti < nt) cnt[ti]++;
        else outside = 1;
    }
    Py_END_ALLOW_THREADS
    return Py_BuildValue("LO", (long long)mx, outside ? Py_True : Py_False);
}

/* level_order(level int8[n]) -> (order int32[n], bounds int64[65])
 * Rows by duration level, in their order within a level (a stable counting sort:
 * IndexWriter.finish's ``np.argsort(level, kind="stable")``, which made an int64 array
 * twice the size of this one), and where each level begins (``np.searchsorted`` of the
 * sorted levels). Levels are 0..63 (trace_index._level of a duration in [0, 2^60]). */
static PyObject *level_order(PyObject *self, PyObject *args) {
    PyArrayObject *lv;
    if (!PyArg_ParseTuple(args, "O!", &PyArray_Type, &lv)) return NULL;
    npy_intp n = PyArray_SIZE(lv), nb = 65;
    if (!check(lv, NPY_INT8, n, "level")) return NULL;
    if (n >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.level_order: too many rows for int32");
        return NULL;
    }
    PyArrayObject *order = (PyArrayObject *)PyArray_EMPTY(1, &n, NPY_INT32, 0);
    PyArrayObject *bounds = (PyArrayObject *)PyArray_ZEROS(1, &nb, NPY_INT64, 0);
    if (!order || !bounds) {
        Py_XDECREF(order);
        Py_XDECREF(bounds);
        return NULL;
    }
    const int8_t *l = PyArray_DATA(lv);
    int32_t *o = PyArray_DATA(order);
    int64_t *b = PyArray_DATA(bounds);
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    for (npy_intp i = 0; i < n; i++) {
        if (l[i] < 0 || l[i] > 63) { ok = 0; break; }
        b[l[i] + 1]++;
    }
    if (ok) {
        for (int k = 0; k < 64; k++) b[k + 1] += b[k];
        int64_t at[64];
        memcpy(at, b, sizeof at);
        for (npy_intp i = 0; i < n; i++) o[at[l[i]]++] = (int32_t)i;
    }
    Py_END_ALLOW_THREADS
    if (!ok) {
        Py_DECREF(order);
        Py_DECREF(bounds);
        PyErr_SetString(PyExc_ValueError, "_trace_build.level_order: a level outside 0..63");
        return NULL;
    }
    return Py_BuildValue("NN", order, bounds);
}

/* inverse(order int32[n]) -> rank int32[n] with rank[order[i]] = i: each reader row's index
 * row (numpy made an n-long arange for it). ``order`` must be a permutation of 0..n-1. */
static PyObject *inverse(PyObject *self, PyObject *args) {
    PyArrayObject *ord;
    if (!PyArg_ParseTuple(args, "O!", &PyArray_Type, &ord)) return NULL;
    npy_intp n = PyArray_SIZE(ord);
    if (!check(ord, NPY_INT32, n, "order")) return NULL;
    PyArrayObject *rank = (PyArrayObject *)PyArray_EMPTY(1, &n, NPY_INT32, 0);
    if (!rank) return NULL;
    const int32_t *o = PyArray_DATA(ord);
    int32_t *r = PyArray_DATA(rank);
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    memset(r, 0xff, sizeof(int32_t) * n);  /* -1: not seen yet */
    for (npy_intp i = 0; i < n; i++) {
        int32_t q = o[i];
        if (q < 0 || q >= n || r[q] >= 0) { ok = 0; break; }
        r[q] = (int32_t)i;
    }
    Py_END_ALLOW_THREADS
    if (!ok) {
        Py_DECREF(rank);
        PyErr_SetString(PyExc_ValueError, "_trace_build.inverse: order is not a permutation");
        return NULL;
    }
    return (PyObject *)rank;
}

/* take(src, rows int32[m], out[m]) -> bool: out[i] = src[rows[i]] cast to out's dtype (as
 * numpy's ``astype`` casts), and whether every value fitted it. IndexWriter.finish's column
 * gathers into the index order: numpy's fancy indexing plus the narrowing ``astype`` made
 * two whole-column arrays per column (and ~10 % of the build's samples in its mapiter); a
 * column's dtype is picked by the caller (_narrowest's rule) or, for the durations' uint32
 * head, checked by the answer. src: int64, int32 or int16; out: int64, int32, uint32,
 * int16, uint16, int8 or uint8. */
#define TAKE_LOOP(S, D)                                                  \
    do {                                                                 \
        const S *sp = (const S *)src;                                    \
        D *dp = (D *)dst;                                                \
        for (npy_intp i = 0; i < m; i++) {                               \
            int32_t q = rows[i];                                         \
            if (q < 0 || q >= n) { ok = 0; break; }                      \
            S v = sp[q];                                                 \
            D w = (D)v;                                                  \
            fits &= ((S)w == v) & ((v < 0) == (w < 0));                  \
            dp[i] = w;                                                   \
        }                                                                \
    } while (0)
#define TAKE_DST(S)                                                      \
    switch (dt) {                                                        \
    case NPY_INT64: TAKE_LOOP(S, int64_t); break;                        \
    case NPY_INT32: TAKE_LOOP(S, int32_t); break;                        \
    case NPY_UINT32: TAKE_LOOP(S, uint32_t); break;                      \
    case NPY_INT16: TAKE_LOOP(S, int16_t); break;                        \
    case NPY_UINT16: TAKE_LOOP(S, uint16_t); break;                      \
    case NPY_INT8: TAKE_LOOP(S, int8_t); break;                          \
    case NPY_UINT8: TAKE_LOOP(S, uint8_t); break;                        \
    default: bad_type = 1;                                               \
    }

static PyObject *take(PyObject *self, PyObject *args) {
    PyArrayObject *sa, *ra, *oa;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyArray_Type, &sa, &PyArray_Type, &ra, &PyArray_Type, &oa)) return NULL;
    npy_intp n = PyArray_SIZE(sa), m = PyArray_SIZE(ra);
    int st = PyArray_TYPE(sa), dt = PyArray_TYPE(oa);
    if (!check(sa, st, n, "src") || !check(ra, NPY_INT32, m, "rows") || !check(oa, dt, m, "out") ||
        !writable(oa, "out"))
        return NULL;
    const void *src = PyArray_DATA(sa);
    void *dst = PyArray_DATA(oa);
    const int32_t *rows = PyArray_DATA(ra);
    int ok = 1, fits = 1, bad_type = 0;
    Py_BEGIN_ALLOW_THREADS
    switch (st) {
    case NPY_INT64: TAKE_DST(int64_t); break;
    case NPY_INT32: TAKE_DST(int32_t); break;
    case NPY_INT16: TAKE_DST(int16_t); break;
    default: bad_type = 1;
    }
    Py_END_ALLOW_THREADS
    if (bad_type) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.take: unsupported dtypes");
        return NULL;
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.take: a row out of range");
        return NULL;
    }
    return PyBool_FromLong(fits);
}

/* sort_track(seg int32[m] (in place), start int64[N], dur int64[N]) -> number of runs
 * A track's rows (``seg``, a stretch of track_order's answer) sorted by (start, longest
 * first), stable: what trace_index._nest's ``np.lexsort((~dur[seg], start[seg]))`` gives.
 * A track out of order is nearly always a few sorted runs (jax308: 1.3 M rows in two runs
 * on each of its two big threads), where the lexsort sorts every duration first; here the
 * runs are found and merged pairwise (a natural merge sort), O(m log runs). */
static inline int row_less(const int64_t *s, const int64_t *d, int32_t a, int32_t b) {
    return s[a] < s[b] || (s[a] == s[b] && d[a] > d[b]);
}

static PyObject *sort_track(PyObject *self, PyObject *args) {
    PyArrayObject *sg, *st, *du;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyArray_Type, &sg, &PyArray_Type, &st, &PyArray_Type, &du)) return NULL;
    npy_intp m = PyArray_SIZE(sg), N = PyArray_SIZE(st);
    if (!check(sg, NPY_INT32, m, "seg") || !writable(sg, "seg") || !check(st, NPY_INT64, N, "start") ||
        !check(du, NPY_INT64, N, "dur"))
        return NULL;
    int32_t *a = PyArray_DATA(sg);
    const int64_t *s = PyArray_DATA(st), *d = PyArray_DATA(du);
    for (npy_intp i = 0; i < m; i++)
        if (a[i] < 0 || a[i] >= N) {
            PyErr_SetString(PyExc_ValueError, "_trace_build.sort_track: a row out of range");
            return NULL;
        }
    /* run starts (and m at the end) */
    npy_intp nr = 1;
    for (npy_intp i = 1; i < m; i++) nr += row_less(s, d, a[i], a[i - 1]);
    npy_intp *runs = malloc(sizeof(npy_intp) * (nr + 1));
    int32_t *tmp = malloc(sizeof(int32_t) * (m ? m : 1));
    if (!runs || !tmp) {
        free(runs);
        free(tmp);
        return PyErr_NoMemory();
    }
    npy_intp runs_found = m ? nr : 0;
    Py_BEGIN_ALLOW_THREADS
    npy_intp k = 0;
    runs[k++] = 0;
    for (npy_intp i = 1; i < m; i++)
        if (row_less(s, d, a[i], a[i - 1])) runs[k++] = i;
    runs[k] = m;
    int32_t *src = a, *dst = tmp;
    while (nr > 1) {
        npy_intp out = 0;
        for (npy_intp r = 0; r < nr; r += 2) {
            npy_intp lo = runs[r], mid = runs[r + 1], hi = r + 2 <= nr ? runs[r + 2] : mid;
            if (r + 1 >= nr) { mid = hi = runs[r + 1]; }
            npy_intp i = lo, j = mid, o = lo;
            /* stable: the left run's row first unless the right one's is strictly less */
            while (i < mid && j < hi) dst[o++] = row_less(s, d, src[j], src[i]) ? src[j++] : src[i++];
            while (i < mid) dst[o++] = src[i++];
            while (j < hi) dst[o++] = src[j++];
            runs[out++] = lo;
        }
        runs[out] = m;
        nr = out;
        int32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, sizeof(int32_t) * m);
    Py_END_ALLOW_THREADS
    free(runs);
    free(tmp);
    return PyLong_FromSsize_t(runs_found);
}

/* merge_runs(starts (int64[m_r], ...), orders (int32[m_r], ...), bounds int64[k*65], bases int64[k],
 *            shift, out_order int32[n], out_start int64[n])
 * The index order (rows by duration level, each level by start, ties by row) of rows
 * that come as k sorted runs: run r is the rows [bases[r], bases[r] + m_r) (the runs
 * cover the rows in row order: a line range decoded by another process, or rows decoded
 * here), already in that order among themselves (``orders[r]``: its rows, local, by
 * level then start; ``starts[r]``: their starts, not yet shifted; ``bounds[r*65 ..]``:
 * where each of its levels begins). Per level the runs' stretches are copied out (rows
 * made global, starts shifted as shift_clip shifts them) and merged pairwise, the left
 * run first on equal starts: so ties stay in row order, as the single build's stable
 * sort leaves them (trace_index._sorted_levels), and the answer is the same order and
 * starts. The caller checks that no shifted start wrapped (they compare as the raw ones). */
static int run_arrays(PyObject *starts, PyObject *orders, npy_intp r, const int64_t *bd, const int64_t **s,
                      const int32_t **o, npy_intp *m) {
    PyObject *sa = PyTuple_GET_ITEM(starts, r), *oa = PyTuple_GET_ITEM(orders, r);
    if (!PyArray_Check(sa) || !PyArray_Check(oa)) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.merge_runs: a run is not an array");
        return 0;
    }
    *m = PyArray_SIZE((PyArrayObject *)sa);
    if (!check((PyArrayObject *)sa, NPY_INT64, *m, "a run's starts") ||
        !check((PyArrayObject *)oa, NPY_INT32, *m, "a run's order"))
        return 0;
    if (bd[0] != 0 || bd[64] != *m) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.merge_runs: a run's bounds do not span it");
        return 0;
    }
    for (int l = 0; l < 64; l++)
        if (bd[l + 1] < bd[l]) {
            PyErr_SetString(PyExc_ValueError, "_trace_build.merge_runs: a run's bounds decrease");
            return 0;
        }
    *s = PyArray_DATA((PyArrayObject *)sa);
    *o = PyArray_DATA((PyArrayObject *)oa);
    return 1;
}

/* one level's stretch [0, m) of (s, o), made of sorted runs at cuts[0..nr]: merged pairwise
 * (stable, as sort_track merges) through (ts, to); the answer is left in (s, o) */
static void merge_level(int64_t *s, int32_t *o, int64_t *ts, int32_t *to, npy_intp *cuts, npy_intp nr) {
    int64_t *as = s, *bs = ts;
    int32_t *ao = o, *bo = to;
    while (nr > 1) {
        npy_intp out = 0;
        for (npy_intp r = 0; r < nr; r += 2) {
            npy_intp lo = cuts[r], mid = cuts[r + 1], hi = r + 2 <= nr ? cuts[r + 2] : mid;
            npy_intp i = lo, j = mid, q = lo;
            while (i < mid && j < hi) {
                if (as[j] < as[i]) { bs[q] = as[j]; bo[q++] = ao[j++]; }
                else { bs[q] = as[i]; bo[q++] = ao[i++]; }
            }
            for (; i < mid; i++, q++) { bs[q] = as[i]; bo[q] = ao[i]; }
            for (; j < hi; j++, q++) { bs[q] = as[j]; bo[q] = ao[j]; }
            cuts[out++] = lo;
        }
        cuts[out] = cuts[nr];
        nr = out;
        int64_t *t = as; as = bs; bs = t;
        int32_t *u = ao; ao = bo; bo = u;
    }
    if (as != s) {
        memcpy(s, as, sizeof(int64_t) * cuts[1]);
        memcpy(o, ao, sizeof(int32_t) * cuts[1]);
    }
}

static PyObject *merge_runs(PyObject *self, PyObject *args) {
    PyObject *starts, *orders;
    PyArrayObject *bda, *bsa, *oo, *os_;
    long long shift;
    if (!PyArg_ParseTuple(args, "O!O!O!O!LO!O!", &PyTuple_Type, &starts, &PyTuple_Type, &orders, &PyArray_Type, &bda,
                          &PyArray_Type, &bsa, &shift, &PyArray_Type, &oo, &PyArray_Type, &os_))
        return NULL;
    npy_intp k = PyTuple_GET_SIZE(starts), n = PyArray_SIZE(oo);
    if (PyTuple_GET_SIZE(orders) != k || k < 1 || !check(bda, NPY_INT64, k * 65, "bounds") ||
        !check(bsa, NPY_INT64, k, "bases") || !check(oo, NPY_INT32, n, "out_order") ||
        !check(os_, NPY_INT64, n, "out_start") || !writable(oo, "out_order") || !writable(os_, "out_start")) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "_trace_build.merge_runs: bad arguments");
        return NULL;
    }
    const int64_t *bd = PyArray_DATA(bda), *base = PyArray_DATA(bsa);
    const int64_t **rs = malloc(sizeof(int64_t *) * k);
    const int32_t **ro = malloc(sizeof(int32_t *) * k);
    npy_intp *cuts = malloc(sizeof(npy_intp) * (k + 1)), biggest = 0, total = 0;
    if (!rs || !ro || !cuts) {
        free(rs); free(ro); free(cuts);
        return PyErr_NoMemory();
    }
    for (npy_intp r = 0; r < k; r++) {
        npy_intp m;
        if (!run_arrays(starts, orders, r, bd + 65 * r, &rs[r], &ro[r], &m)) {
            free(rs); free(ro); free(cuts);
            return NULL;
        }
        if (base[r] != total) {  /* the runs follow one another, from row 0 */
            free(rs); free(ro); free(cuts);
            PyErr_SetString(PyExc_ValueError, "_trace_build.merge_runs: the runs do not cover the rows in order");
            return NULL;
        }
        total += m;
    }
    for (int l = 0; l < 64; l++) {
        npy_intp t = 0;
        for (npy_intp r = 0; r < k; r++) t += bd[65 * r + l + 1] - bd[65 * r + l];
        if (t > biggest) biggest = t;
    }
    if (total != n || n >= INT32_MAX) {
        free(rs); free(ro); free(cuts);
        PyErr_SetString(PyExc_ValueError, "_trace_build.merge_runs: the runs are not the output's rows");
        return NULL;
    }
    int64_t *ts = malloc(sizeof(int64_t) * (biggest ? biggest : 1));
    int32_t *to = malloc(sizeof(int32_t) * (biggest ? biggest : 1));
    if (!ts || !to) {
        free(rs); free(ro); free(cuts); free(ts); free(to);
        return PyErr_NoMemory();
    }
    int64_t *s = PyArray_DATA(os_);
    int32_t *o = PyArray_DATA(oo);
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    npy_intp p = 0;
    for (int l = 0; l < 64 && ok; l++) {
        npy_intp at = 0;
        for (npy_intp r = 0; r < k && ok; r++) {
            cuts[r] = at;
            const int64_t *b = bd + 65 * r;
            for (npy_intp i = b[l]; i < b[l + 1]; i++, at++) {
                int32_t q = ro[r][i];
                if (q < 0 || q >= b[64]) { ok = 0; break; }
                s[p + at] = (int64_t)((uint64_t)rs[r][i] - (uint64_t)shift);
                o[p + at] = (int32_t)(base[r] + q);
            }
        }
        cuts[k] = at;
        if (ok) merge_level(s + p, o + p, ts, to, cuts, k);
        p += at;
    }
    Py_END_ALLOW_THREADS
    free(rs); free(ro); free(cuts); free(ts); free(to);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.merge_runs: a run's row out of range");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* window_pick(start int64[N], dur uint32|int64[N], tail int64[T], at, track int[N], depth int[N],
 *             ranges int64[2k], trows int32|int64[m], s, e, p, res, ntracks, ndepths)
 *   -> (rows int64[>= j], j, thinned) | None
 * TraceIndex.window_rows' pass over a window's candidates (its numpy twin is
 * TraceIndex._window_rows_numpy): the rows of each stretch [ranges[2i], ranges[2i+1]) (a
 * duration level's rows from the first that can reach s to the last starting before e, each
 * stretch in start order) and then the tier's rows ``trows`` (in start order too); those
 * overlapping [s, e) (``start < e`` and ``end > s``, or a zero-length one starting in it)
 * put in start order, stable (merging their runs: numpy's ``argsort(kind="stable")`` of
 * them one after another); of those narrower than a pixel ``p`` only the first of each
 * (track, depth, pixel), the pixel ``clip((start - s) // p, 0, res + 1)``: in start order a
 * (track, depth) row's pixels never decrease, so one pass holding the last pixel of each
 * row finds them. Durations are the index's as TraceIndex reads them: the uint32 column,
 * and from row ``at`` on the int64 ``tail`` (trace_index._Widened). The answer's first j
 * rows are the window's. None where a narrow event's track or depth is outside
 * [0, ntracks) x [0, ndepths), that table is large beside the window, or N >= 2^31: the
 * numpy path does those (both compared in
 * tests/test_trace_window_encoding.py). */
static int int_type(int t) {
    return t == NPY_INT8 || t == NPY_UINT8 || t == NPY_INT16 || t == NPY_UINT16 || t == NPY_INT32 ||
           t == NPY_UINT32 || t == NPY_INT64;
}

static inline int64_t get_int(const char *base, int t, npy_intp i) {
    switch (t) {
    case NPY_INT8: return ((const int8_t *)base)[i];
    case NPY_UINT8: return ((const uint8_t *)base)[i];
    case NPY_INT16: return ((const int16_t *)base)[i];
    case NPY_UINT16: return ((const uint16_t *)base)[i];
    case NPY_INT32: return ((const int32_t *)base)[i];
    case NPY_UINT32: return ((const uint32_t *)base)[i];
    default: return ((const int64_t *)base)[i];
    }
}

/* a candidate: its start, row, and (track, depth) cell when narrower than a pixel, else -1 */
typedef struct { int64_t start; int32_t row, cell; } cand_t;

/* ``a``'s ascending runs (split where a start is less than the one before) merged into one,
 * stable (the left run's row first unless the right one's starts earlier): the adjacent pair
 * with the fewest rows first while there are few runs (a window's stretches: the tier's big
 * run is then merged once, last), pairwise passes otherwise. ``runs`` has room for m + 1. */
static void merge_one(cand_t *a, cand_t *tmp, npy_intp lo, npy_intp mid, npy_intp hi) {
    npy_intp i = lo, j = mid, o = lo;
    while (i < mid && j < hi) {
        int right = a[j].start < a[i].start;
        tmp[o++] = right ? a[j] : a[i];
        j += right;
        i += !right;
    }
    memcpy(tmp + o, a + i, sizeof(cand_t) * (mid - i));
    o += mid - i;
    memcpy(tmp + o, a + j, sizeof(cand_t) * (hi - j));
    memcpy(a + lo, tmp + lo, sizeof(cand_t) * (hi - lo));
}

static void merge_cand_runs(cand_t *a, cand_t *tmp, npy_intp m, npy_intp *runs) {
    npy_intp nr = 0;
    runs[nr++] = 0;
    for (npy_intp i = 1; i < m; i++)
        if (a[i].start < a[i - 1].start) runs[nr++] = i;
    runs[nr] = m;
    while (nr > 1) {
        if (nr > 64) {
            npy_intp out = 0;
            for (npy_intp r = 0; r < nr; r += 2) {
                if (r + 1 < nr) merge_one(a, tmp, runs[r], runs[r + 1], runs[r + 2]);
                runs[out++] = runs[r];
            }
            runs[out] = m;
            nr = out;
            continue;
        }
        npy_intp best = 0;
        for (npy_intp r = 1; r + 1 < nr; r++)
            if (runs[r + 2] - runs[r] < runs[best + 2] - runs[best]) best = r;
        merge_one(a, tmp, runs[best], runs[best + 1], runs[best + 2]);
        memmove(runs + best + 1, runs + best + 2, sizeof(npy_intp) * (nr - best - 1));
        nr--;
    }
}

static PyObject *window_pick(PyObject *self, PyObject *args) {
    PyArrayObject *sa, *da, *ta, *tr, *dp, *ra, *wa;
    Py_ssize_t at;
    long long s, e, p, res, ntracks, ndepths;
    if (!PyArg_ParseTuple(args, "O!O!O!nO!O!O!O!LLLLLL", &PyArray_Type, &sa, &PyArray_Type, &da, &PyArray_Type, &ta,
                          &at, &PyArray_Type, &tr, &PyArray_Type, &dp, &PyArray_Type, &ra, &PyArray_Type, &wa, &s, &e,
                          &p, &res, &ntracks, &ndepths))
        return NULL;
    npy_intp N = PyArray_SIZE(sa), T = PyArray_SIZE(ta), nr = PyArray_SIZE(ra), nw = PyArray_SIZE(wa);
    int dt = PyArray_TYPE(da), trt = PyArray_TYPE(tr), dpt = PyArray_TYPE(dp), wt = PyArray_TYPE(wa);
    if (!check(sa, NPY_INT64, N, "start") || !check(da, dt, N, "dur") || !check(ta, NPY_INT64, T, "tail") ||
        !check(tr, trt, N, "track") || !check(dp, dpt, N, "depth") || !check(ra, NPY_INT64, nr, "ranges") ||
        !check(wa, wt, nw, "trows"))
        return NULL;
    if ((dt != NPY_UINT32 && dt != NPY_INT64) || !int_type(trt) || !int_type(dpt) ||
        (wt != NPY_INT32 && wt != NPY_INT64) || nr % 2 || at < 0 || at + T != N || p < 1 || res < 0 ||
        ntracks < 1 || ndepths < 1 || ntracks > (1 << 20) || ndepths > (1 << 20)) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.window_pick: bad arguments");
        return NULL;
    }
    if (N >= INT32_MAX || ntracks * ndepths >= INT32_MAX) Py_RETURN_NONE;
    const int64_t *st = PyArray_DATA(sa), *tail = PyArray_DATA(ta), *rg = PyArray_DATA(ra);
    const char *du = PyArray_DATA(da), *tk = PyArray_DATA(tr), *de = PyArray_DATA(dp), *tw = PyArray_DATA(wa);
    npy_intp m = nw;
    for (npy_intp i = 0; i < nr; i += 2) {
        if (rg[i] < 0 || rg[i] > rg[i + 1] || rg[i + 1] > N) {
            PyErr_SetString(PyExc_ValueError, "_trace_build.window_pick: a range out of bounds");
            return NULL;
        }
        m += rg[i + 1] - rg[i];
    }
    /* a (track, depth) table far larger than the window (an index of many tracks): set to -1
     * per window it would cost more than the numpy path's sort */
    if (ntracks * ndepths > (1 << 20) && ntracks * ndepths > 4 * (long long)m) Py_RETURN_NONE;
    npy_intp dims[1] = {m};
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(1, dims, NPY_INT64);
    cand_t *c = malloc(sizeof(cand_t) * (m ? 2 * m : 1));
    npy_intp *runs = malloc(sizeof(npy_intp) * (m + 2));
    int64_t *lastpx = malloc(sizeof(int64_t) * ntracks * ndepths);
    if (!out || !c || !runs || !lastpx) {
        Py_XDECREF(out);
        free(c);
        free(runs);
        free(lastpx);
        return out ? PyErr_NoMemory() : NULL;
    }
    int64_t *kept = PyArray_DATA(out);
    npy_intp k = 0, nk = 0;
    int bad_row = 0, decline = 0, thinned = 0;
    Py_BEGIN_ALLOW_THREADS
    /* the candidates overlapping [s, e) (TraceIndex._overlap's test); the columns read
     * through DUR, TRK and DEP (typed for the index's usual narrow dtypes below) */
#define CAND(ROW)                                                                               \
    do {                                                                                        \
        int64_t r_ = (ROW), a_ = st[r_], d_ = r_ >= at ? tail[r_ - at] : DUR(r_);               \
        if (a_ < e && (a_ + d_ > s || (d_ == 0 && a_ >= s))) {                                  \
            int64_t cell_ = -1;                                                                 \
            if (d_ < p) {                                                                       \
                int64_t t_ = TRK(r_), z_ = DEP(r_);                                             \
                if (t_ < 0 || t_ >= ntracks || z_ < 0 || z_ >= ndepths) decline = 1;            \
                cell_ = t_ * ndepths + z_;                                                      \
            }                                                                                   \
            c[k].start = a_;                                                                    \
            c[k].row = (int32_t)r_;                                                             \
            c[k++].cell = (int32_t)cell_;                                                       \
        }                                                                                       \
    } while (0)
#define CANDIDATES(TROW)                                                                        \
    do {                                                                                        \
        for (npy_intp i = 0; i < nr; i += 2)                                                    \
            for (int64_t r = rg[i]; r < rg[i + 1]; r++) CAND(r);                                \
        k1 = k;                                                                                 \
        for (npy_intp i = 0; i < nw && !bad_row; i++) {                                         \
            int64_t r = (TROW);                                                                 \
            if (r < 0 || r >= N) bad_row = 1;                                                   \
            else CAND(r);                                                                       \
        }                                                                                       \
    } while (0)
    npy_intp k1 = 0; /* the stretches' candidates, then the tier's */
    if (dt == NPY_UINT32 && trt == NPY_UINT8 && dpt == NPY_INT8 && wt == NPY_INT32) {
#define DUR(r) ((const uint32_t *)du)[r]
#define TRK(r) ((const uint8_t *)tk)[r]
#define DEP(r) ((const int8_t *)de)[r]
        CANDIDATES(((const int32_t *)tw)[i]);
#undef DUR
#undef TRK
#undef DEP
    } else if (dt == NPY_UINT32 && trt == NPY_UINT16 && dpt == NPY_INT8 && wt == NPY_INT32) {
#define DUR(r) ((const uint32_t *)du)[r]
#define TRK(r) ((const uint16_t *)tk)[r]
#define DEP(r) ((const int8_t *)de)[r]
        CANDIDATES(((const int32_t *)tw)[i]);
#undef DUR
#undef TRK
#undef DEP
    } else {
#define DUR(r) get_int(du, dt, r)
#define TRK(r) get_int(tk, trt, r)
#define DEP(r) get_int(de, dpt, r)
        CANDIDATES(get_int(tw, wt, i));
#undef DUR
#undef TRK
#undef DEP
    }
#undef CANDIDATES
#undef CAND
    if (!bad_row && !decline) {
        /* each part in start order (the tier's rows are already: one run), then the two
         * merged as they are read (the stretches' row first where the starts tie) */
        merge_cand_runs(c, c + m, k1, runs);
        merge_cand_runs(c + k1, c + m, k - k1, runs);
        for (int64_t i = 0; i < ntracks * ndepths; i++) lastpx[i] = -1;
        /* each narrow row's pixel: a division only when the start passes the pixel's end */
        int64_t px = 0, next = p;
        for (npy_intp i = 0, j = k1; i < k1 || j < k;) {
            const cand_t *x = (j < k && (i >= k1 || c[j].start < c[i].start)) ? &c[j++] : &c[i++];
            if (x->cell >= 0) {
                int64_t off = x->start - s;
                if (off >= next) {
                    px = off / p;
                    next = (px + 1) * p;
                }
                int64_t q = px > res + 1 ? res + 1 : px;
                if (lastpx[x->cell] == q) {
                    thinned = 1;
                    continue;
                }
                lastpx[x->cell] = q;
            }
            kept[nk++] = x->row;
        }
    }
    Py_END_ALLOW_THREADS
    free(c);
    free(runs);
    free(lastpx);
    if (bad_row || decline) {
        Py_DECREF(out);
        if (decline) Py_RETURN_NONE;
        PyErr_SetString(PyExc_ValueError, "_trace_build.window_pick: a tier row out of range");
        return NULL;
    }
    return Py_BuildValue("(NnO)", out, nk, thinned ? Py_True : Py_False);
}


/* dense_numbers(ids int64[n] or uint64[n]) -> (uniq, inverse int32[n])
 * ``np.unique(ids, return_inverse=True)`` (the ids ordered as their dtype orders them),
 * the inverse as int32: trace_visibility._dense's numpy twin. An LSD radix sort of
 * (id, position) pairs, 11 bits a pass, a pass skipped where every id has the same
 * digit: numpy's argsort of jax308's 2.4 M flow ids (hashes, XProf's 56-bit flow ids)
 * was ~0.25 CPU s of the first XProf window, in the build (FLOW_DENSE_FILE) or in the
 * zoom levels' flow pre-pass. */
#define DN_BITS 11
#define DN_PASSES 6
static PyObject *dense_numbers(PyObject *self, PyObject *args) {
    PyArrayObject *ia;
    if (!PyArg_ParseTuple(args, "O!", &PyArray_Type, &ia)) return NULL;
    int type = PyArray_TYPE(ia);
    if (type != NPY_INT64 && type != NPY_UINT64) type = NPY_INT64;  /* (check() names the error) */
    npy_intp n = PyArray_SIZE(ia);
    if (!check(ia, type, n, "ids")) return NULL;
    if (n >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "_trace_build.dense_numbers: too many ids for int32");
        return NULL;
    }
    /* signed ids compare as unsigned once their top bit is flipped */
    const uint64_t flip = type == NPY_INT64 ? (uint64_t)1 << 63 : 0;
    const uint64_t *v = PyArray_DATA(ia);
    npy_intp cap = n ? n : 1;
    uint64_t *k0 = malloc(cap * sizeof *k0), *k1 = malloc(cap * sizeof *k1);
    int32_t *p0 = malloc(cap * sizeof *p0), *p1 = malloc(cap * sizeof *p1);
    npy_intp (*hist)[1 << DN_BITS] = calloc(DN_PASSES, sizeof *hist);
    PyArrayObject *inverse = (PyArrayObject *)PyArray_EMPTY(1, &n, NPY_INT32, 0);
    if (!k0 || !k1 || !p0 || !p1 || !hist || !inverse) {
        free(k0); free(k1); free(p0); free(p1); free(hist);
        Py_XDECREF(inverse);
        return PyErr_NoMemory();
    }
    int32_t *inv = PyArray_DATA(inverse);
    npy_intp distinct = 0;
    Py_BEGIN_ALLOW_THREADS
    for (npy_intp i = 0; i < n; i++) {
        uint64_t k = v[i] ^ flip;
        k0[i] = k;
        p0[i] = (int32_t)i;
        for (int d = 0; d < DN_PASSES; d++) hist[d][(k >> (d * DN_BITS)) & ((1 << DN_BITS) - 1)]++;
    }
    for (int d = 0; d < DN_PASSES; d++) {
        npy_intp *h = hist[d], at = 0;
        int trivial = 0;
        for (int b = 0; b < (1 << DN_BITS); b++) {
            if (h[b] == n) trivial = 1;
            npy_intp c = h[b];
            h[b] = at;
            at += c;
        }
        if (trivial) continue;  /* every id has this digit: the pass would move nothing */
        int sh = d * DN_BITS;
        for (npy_intp i = 0; i < n; i++) {
            npy_intp to = h[(k0[i] >> sh) & ((1 << DN_BITS) - 1)]++;
            k1[to] = k0[i];
            p1[to] = p0[i];
        }
        uint64_t *tk = k0; k0 = k1; k1 = tk;
        int32_t *tp = p0; p0 = p1; p1 = tp;
    }
    for (npy_intp i = 0; i < n; i++) {
        if (i && k0[i] != k0[i - 1]) distinct++;
        inv[p0[i]] = (int32_t)distinct;
        k1[distinct] = k0[i];  /* (k1 is free: the distinct ids, sorted) */
    }
    if (n) distinct++;
    Py_END_ALLOW_THREADS
    free(k0); free(p0); free(p1); free(hist);
    PyArrayObject *uniq = (PyArrayObject *)PyArray_EMPTY(1, &distinct, type, 0);
    if (!uniq) {
        free(k1);
        Py_DECREF(inverse);
        return NULL;
    }
    uint64_t *u = PyArray_DATA(uniq);
    for (npy_intp i = 0; i < distinct; i++) u[i] = k1[i] ^ flip;
    free(k1);
    return Py_BuildValue("NN", uniq, inverse);
}

static PyMethodDef methods[] = {
    {"shift_clip", shift_clip, METH_VARARGS, "Starts shifted, durations clipped, the last end and events per track."},
    {"level_order", level_order, METH_VARARGS, "Rows by duration level (stable) and each level's bounds."},
    {"inverse", inverse, METH_VARARGS, "The inverse of a permutation (each reader row's index row)."},
    {"take", take, METH_VARARGS, "A gather with a cast, and whether every value fitted."},
    {"track_order", track_order, METH_VARARGS, "Rows grouped by track (stable) and the tracks out of order."},
    {"merge_runs", merge_runs, METH_VARARGS, "Rows in index order from runs already in it (line ranges' own sorts)."},
    {"sort_track", sort_track, METH_VARARGS, "A track's rows by (start, longest first), stable, by merging its runs."},
    {"depths", depths, METH_VARARGS, "Nesting depth per row and track (trace_index._depths)."},
    {"tiers", tiers, METH_VARARGS, "Every resolution tier's picks in one pass (trace_index._build_tiers)."},
    {"tier_merge", tier_merge, METH_VARARGS, "The kept tiers' rows sorted by start, by one merge of the levels."},
    {"zoom_level", zoom_level, METH_VARARGS, "One of XProf's zoom levels (trace_visibility.ZoomLevels._level)."},
    {"zoom_levels", zoom_levels, METH_VARARGS, "Several of XProf's zoom levels in one walk (ZoomLevels._levels_native)."},
    {"window_pick", window_pick, METH_VARARGS, "A window's rows in start order, the narrow ones thinned (TraceIndex.window_rows)."},
    {"dense_numbers", dense_numbers, METH_VARARGS, "np.unique's sorted ids and int32 inverse (trace_visibility._dense)."},
    {"flow_pass", flow_pass, METH_VARARGS, "XProf's flow visibility at one level (trace_visibility.ZoomLevels._flow_pass)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_trace_build", NULL, -1, methods};

PyMODINIT_FUNC PyInit__trace_build(void) {
    import_array();
    return PyModule_Create(&module);
}
