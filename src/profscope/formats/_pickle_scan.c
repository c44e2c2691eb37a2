/* One-pass reader of a PyTorch CUDA memory snapshot pickle, the native twin of the tree
 * reader in profscope/formats/snapshot_pickle.py (_NoGlobalsUnpickler + normalize): it
 * runs the pickle stack machine (Lib/pickle.py _Unpickler; opcode semantics from
 * Lib/pickletools.py) over the bytes fed to it and builds plain containers as that
 * reader does, except for trace entries (``device_traces[d][i]``, a dict with an
 * "action" key appended to a list): those become one row of numpy columns at once, and
 * their dicts are never kept.
 *
 * Only what pickle.dumps writes for dict, list, (pairs of ints as) tuple, str, bytes, int,
 * float, bool and None in protocols 2-5 is understood. Every other opcode -- GLOBAL,
 * STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ(_EX), PERSID, BINPERSID, EXT*, buffers,
 * sets, protocol-0 text opcodes, DUP/POP -- and anything the tree reader or its prescan
 * (safe_pickle.Prescan) would treat differently (a memo index beyond what a pickler
 * writes, a field over MAX_FIELD_BYTES, a tuple that is not a pair of ints, more than
 * 256 actions, a float address, an entry referred to again, a truncated stream...) raises
 * Unusual (a ValueError): the caller then reads the file with the tree reader, which
 * gives the authoritative result or error. Nothing is called, nothing is looked up.
 *
 * Rows: action (uint8 code, from the codes dict given; an action not in it is added with
 * the next code), addr/size/stream (int64), time_us (int64, -1 absent), frames (int32:
 * 0 = none/empty, k = the k-th distinct traceback, by the identities of its frame dicts,
 * in order of first appearance; its list is kept in ``reps``), compile_context /
 * user_metadata (int32 into per-column string tables in order of first appearance, -1
 * absent), device_free (int64, oom rows only, -1 otherwise), layout (uint8: which keys
 * the entry had). The usual entry is decoded straight from its bytes (fast_entry);
 * anything else about it goes through the opcode loop and entry_row, with the same row.
 *
 * Identity with the tree reader: a traceback is keyed when its entry is read, so a list
 * used as frames may not change afterwards (APPEND to it, or rows into it, is Unusual);
 * an entry's dict must be referred to by nothing but its memo slot; a list of rows must
 * sit in exactly one place of the tree (normalize then finds it in device_traces).
 *
 * Every read is bounded by the bytes fed; nothing is allocated from a size read from the
 * file before that many bytes have arrived (the row columns are reserved from the size
 * of the file, given by the caller; untouched pages cost nothing).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FIELD_BYTES ((Py_ssize_t)64 << 20) /* safe_pickle.MAX_FIELD_BYTES */
#define MAX_MARKS 64                           /* safe_pickle.MAX_DEPTH */
#define MAX_KEY_NAMES 64
#define MAX_LAYOUTS 255
#define NO_TIME (-1)

static PyObject *Unusual;  /* _pickle_scan.Unusual (ValueError): read it the other way */
static PyObject *ROW;      /* on the stack in place of an entry turned into a row */
static PyObject *CONSUMED; /* in the memo in place of an entry turned into a row */

enum { F_ACTION, F_ADDR, F_SIZE, F_STREAM, F_TIME, F_FRAMES, F_CC, F_UM, F_DFREE, F_OTHER, N_FIELDS };
static const char *const FIELD_NAMES[F_OTHER] = {
    "action", "addr", "size", "stream", "time_us", "frames", "compile_context", "user_metadata", "device_free",
};
#define OOM_CODE 8 /* model.snapshot.ACTIONS.index("oom") */

typedef struct {
    PyObject *key; /* strong */
    int field;
    int name; /* index into key_names, -1 until the key is seen in an entry */
} KeyCache;

typedef struct {
    uint64_t hash;
    int32_t id; /* 1-based index into reps, 0 = empty slot */
} RepSlot;

typedef struct {
    PyObject *p;
    int32_t id;
} RepPtr;

typedef struct {
    PyObject_HEAD
    /* input */
    uint8_t *buf;
    Py_ssize_t len, cap, pos;
    long long base;      /* offset in the pickle of buf[0] */
    long long frame_end; /* bytes the last FRAME says exist */
    int done, started;
    int prev_int, prev_int2; /* the last two opcodes were BININT* (TUPLE2 of ints) */
    /* stack machine */
    PyObject **stack;
    int32_t *slot; /* memo slot the stack item was put in: -1 none, -2 more than one */
    Py_ssize_t sp, scap;
    Py_ssize_t marks[MAX_MARKS];
    int nmarks;
    PyObject **memo;
    Py_ssize_t msize, mfilled;
    PyObject *result;
    /* rows */
    uint8_t *action, *layout;
    int64_t *addr, *size, *stream, *time_us, *dfree;
    int32_t *frames, *cc, *um;
    Py_ssize_t nrows, rcap, pending;
    Py_ssize_t fast_rows; /* rows read by fast_entry */
    PyObject *codes;     /* dict: action name -> code (given) */
    PyObject *act_key[32];
    int act_code[32], nact;
    KeyCache keys[128];
    int nkeys;
    int16_t kidx[256]; /* keys[] by pointer hash: the usual key found in one look, -1 none */
    PyObject *key_names; /* list of str: the keys seen in entries, by bit */
    uint64_t layouts[MAX_LAYOUTS];
    int nlayouts;
    /* tracebacks */
    PyObject *reps; /* list of lists */
    RepSlot *rtab;
    Py_ssize_t rtcap;
    RepPtr *rset; /* the rep lists (id > 0) and the empty frames lists (id -1), by pointer:
                   * none may grow once used as an entry's frames */
    Py_ssize_t rscount;
    PyObject *frozen;     /* the empty frames lists, kept alive while their pointers are known */
    PyObject *empty_list; /* what fast_entry puts in the memo for a new empty traceback */
    Py_ssize_t rscap;
    PyObject *cc_ids, *cc_strs, *um_ids, *um_strs;
    PyObject *cc_last, *um_last; /* the last string interned (borrowed: the tables hold it) */
    int32_t cc_last_id, um_last_id;
    PyObject *row_lists; /* dict id(list) -> [list, start, end] */
} Scanner;

/* The n-byte little-endian number at p (pickle arguments are little-endian). */
static inline uint64_t le(const uint8_t *p, int n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n == 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    if (n == 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
#endif
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static int unusual(const char *why, long long at)
{
    PyErr_Format(Unusual, "%s at byte %lld", why, at);
    return -1;
}

static int grow(void **p, Py_ssize_t *cap, Py_ssize_t need, size_t item)
{
    if (need <= *cap)
        return 0;
    Py_ssize_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * item);
    if (!q) {
        PyErr_NoMemory();
        return -1;
    }
    *p = q;
    *cap = c;
    return 0;
}

static int push(Scanner *s, PyObject *o) /* steals o */
{
    if (o == NULL)
        return -1;
    if (s->sp >= s->scap) {
        Py_ssize_t c = s->scap ? s->scap * 2 : 1024;
        PyObject **st = realloc(s->stack, c * sizeof(PyObject *));
        if (!st) {
            Py_DECREF(o);
            PyErr_NoMemory();
            return -1;
        }
        s->stack = st;
        int32_t *sl = realloc(s->slot, c * sizeof(int32_t));
        if (!sl) {
            Py_DECREF(o);
            PyErr_NoMemory();
            return -1;
        }
        s->slot = sl;
        s->scap = c;
    }
    s->stack[s->sp] = o;
    s->slot[s->sp] = -1;
    s->sp++;
    return 0;
}

static void pop_to(Scanner *s, Py_ssize_t to)
{
    while (s->sp > to) {
        s->sp--;
        Py_DECREF(s->stack[s->sp]);
    }
}

/* -- pointer hashing (tracebacks by the identities of their frames) ------------------ */

static inline uint64_t mix(uint64_t h, uint64_t v)
{
    return (h ^ (v >> 4)) * 0x100000001B3ULL + (h >> 29);
}

static int rset_add(Scanner *s, PyObject *l, int32_t id);
static int32_t rset_has(Scanner *s, PyObject *l);

static int rtab_rehash(Scanner *s, Py_ssize_t cap)
{
    RepSlot *t = calloc((size_t)cap, sizeof(RepSlot));
    if (!t) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < s->rtcap; i++) {
        RepSlot e = s->rtab[i];
        if (!e.id)
            continue;
        Py_ssize_t j = (Py_ssize_t)(e.hash & (uint64_t)(cap - 1));
        while (t[j].id)
            j = (j + 1) & (cap - 1);
        t[j] = e;
    }
    free(s->rtab);
    s->rtab = t;
    s->rtcap = cap;
    return 0;
}

/* The 1-based id of the traceback whose frames are those of list l (registered on its
 * first appearance), or -1 on error. */
static int32_t traceback_id(Scanner *s, PyObject *l)
{
    int32_t known = rset_has(s, l); /* a list already keyed (a shared traceback) */
    if (known > 0)
        return known;
    Py_ssize_t n = PyList_GET_SIZE(l);
    PyObject **items = ((PyListObject *)l)->ob_item;
    uint64_t h = (uint64_t)n;
    for (Py_ssize_t i = 0; i < n; i++)
        h = mix(h, (uint64_t)(uintptr_t)items[i]);
    Py_ssize_t nreps = PyList_GET_SIZE(s->reps);
    if ((nreps + 1) * 2 > s->rtcap && rtab_rehash(s, s->rtcap ? s->rtcap * 2 : 4096) < 0)
        return -1;
    Py_ssize_t mask = s->rtcap - 1, j = (Py_ssize_t)(h & (uint64_t)mask);
    while (s->rtab[j].id) {
        if (s->rtab[j].hash == h) {
            PyObject *r = PyList_GET_ITEM(s->reps, s->rtab[j].id - 1);
            if (PyList_GET_SIZE(r) == n && memcmp(((PyListObject *)r)->ob_item, items, n * sizeof(PyObject *)) == 0)
                return s->rtab[j].id;
        }
        j = (j + 1) & mask;
    }
    if (nreps >= INT32_MAX - 1)
        return unusual("too many tracebacks", s->base + s->pos);
    if (PyList_Append(s->reps, l) < 0 || rset_add(s, l, (int32_t)(nreps + 1)) < 0)
        return -1;
    s->rtab[j].hash = h;
    s->rtab[j].id = (int32_t)(nreps + 1);
    return (int32_t)(nreps + 1);
}

static inline Py_ssize_t ptr_slot(PyObject *p, Py_ssize_t cap)
{
    uint64_t h = (uint64_t)(uintptr_t)p;
    h = (h ^ (h >> 29)) * 0xBF58476D1CE4E5B9ULL;
    return (Py_ssize_t)((h >> 17) & (uint64_t)(cap - 1));
}

/* The id of rep list l (0: not a rep). */
static int32_t rset_has(Scanner *s, PyObject *l)
{
    if (!s->rscap)
        return 0;
    Py_ssize_t j = ptr_slot(l, s->rscap);
    while (s->rset[j].p) {
        if (s->rset[j].p == l)
            return s->rset[j].id;
        j = (j + 1) & (s->rscap - 1);
    }
    return 0;
}

static int rset_add(Scanner *s, PyObject *l, int32_t id)
{
    Py_ssize_t n = ++s->rscount;
    if (n * 2 > s->rscap) {
        Py_ssize_t cap = s->rscap ? s->rscap * 2 : 4096;
        RepPtr *t = calloc((size_t)cap, sizeof(RepPtr));
        if (!t) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < s->rscap; i++) {
            if (!s->rset[i].p)
                continue;
            Py_ssize_t j = ptr_slot(s->rset[i].p, cap);
            while (t[j].p)
                j = (j + 1) & (cap - 1);
            t[j] = s->rset[i];
        }
        free(s->rset);
        s->rset = t;
        s->rscap = cap;
    }
    Py_ssize_t j = ptr_slot(l, s->rscap);
    while (s->rset[j].p) {
        if (s->rset[j].p == l)
            return 0;
        j = (j + 1) & (s->rscap - 1);
    }
    s->rset[j].p = l;
    s->rset[j].id = id;
    return 0;
}

/* An empty list used as an entry's frames: it may not grow afterwards (the tree reader
 * would see what it grew to). */
static int freeze_empty(Scanner *s, PyObject *l)
{
    if (rset_has(s, l))
        return 0;
    if (PyList_Append(s->frozen, l) < 0)
        return -1;
    return rset_add(s, l, -1);
}

/* -- the memo --------------------------------------------------------------------------- */

/* memo[idx] = o (a new reference is taken); idx already checked. */
static int memo_set(Scanner *s, Py_ssize_t idx, PyObject *o)
{
    if (idx >= s->msize) {
        Py_ssize_t c = s->msize ? s->msize : 4096;
        while (c <= idx)
            c *= 2;
        PyObject **m = realloc(s->memo, (size_t)c * sizeof(PyObject *));
        if (!m) {
            PyErr_NoMemory();
            return -1;
        }
        memset(m + s->msize, 0, (size_t)(c - s->msize) * sizeof(PyObject *));
        s->memo = m;
        s->msize = c;
    }
    Py_INCREF(o);
    PyObject *old = s->memo[idx];
    s->memo[idx] = o;
    if (old)
        Py_DECREF(old);
    else
        s->mfilled++;
    return 0;
}

static int memo_put(Scanner *s, Py_ssize_t idx, long long at)
{
    if (s->sp < 1 || (s->nmarks && s->marks[s->nmarks - 1] == s->sp))
        return unusual("a memo put with nothing to put", at);
    PyObject *o = s->stack[s->sp - 1];
    if (o == ROW)
        return unusual("a trace entry put in the memo twice", at);
    /* A pickler numbers its slots in order (Lib/pickle.py memoize: len(self.memo)), so a
     * slot far beyond the filled ones is left to the tree reader (safe_pickle.Prescan
     * bounds it there): the memo never holds more slots than puts seen, plus 64. */
    if (idx < 0 || idx > s->mfilled + 64)
        return unusual("a memo index beyond what a pickler writes", at);
    if (memo_set(s, idx, o) < 0)
        return -1;
    int32_t *sl = &s->slot[s->sp - 1];
    *sl = (*sl == -1 && idx <= INT32_MAX) ? (int32_t)idx : -2;
    return 0;
}

static int memo_get(Scanner *s, Py_ssize_t idx, long long at)
{
    if (idx < 0 || idx >= s->msize || s->memo[idx] == NULL)
        return unusual("a memo reference to an empty slot", at);
    PyObject *o = s->memo[idx];
    if (o == CONSUMED)
        return unusual("a reference back to a trace entry", at);
    Py_INCREF(o);
    return push(s, o);
}

/* -- keys and values of trace entries --------------------------------------------------- */

static inline unsigned key_hash(PyObject *k)
{
    uintptr_t v = (uintptr_t)k;
    return (unsigned)((v >> 4) ^ (v >> 12)) & 255;
}

static int key_field(Scanner *s, PyObject *k, int *name)
{
    int c = s->kidx[key_hash(k)];
    if (c >= 0 && s->keys[c].key == k) {
        *name = s->keys[c].name;
        return s->keys[c].field;
    }
    for (int i = 0; i < s->nkeys; i++)
        if (s->keys[i].key == k) {
            s->kidx[key_hash(k)] = (int16_t)i;
            *name = s->keys[i].name;
            return s->keys[i].field;
        }
    int f = F_OTHER;
    for (int i = 0; i < F_OTHER; i++)
        if (PyUnicode_CompareWithASCIIString(k, FIELD_NAMES[i]) == 0) {
            f = i;
            break;
        }
    *name = -1;
    if (s->nkeys < (int)(sizeof(s->keys) / sizeof(s->keys[0]))) {
        Py_INCREF(k);
        s->keys[s->nkeys].key = k;
        s->keys[s->nkeys].field = f;
        s->keys[s->nkeys].name = -1;
        s->kidx[key_hash(k)] = (int16_t)s->nkeys;
        s->nkeys++;
    }
    return f;
}

/* The bit of key k among the keys seen in entries (names kept for era_keys). */
static int key_bit(Scanner *s, PyObject *k, long long at)
{
    int c = s->kidx[key_hash(k)];
    if (c >= 0 && s->keys[c].key == k && s->keys[c].name >= 0)
        return s->keys[c].name;
    for (int i = 0; i < s->nkeys; i++)
        if (s->keys[i].key == k && s->keys[i].name >= 0)
            return s->keys[i].name;
    Py_ssize_t n = PyList_GET_SIZE(s->key_names);
    int bit = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int c = PyUnicode_Compare(PyList_GET_ITEM(s->key_names, i), k);
        if (c == -1 && PyErr_Occurred())
            return -1;
        if (c == 0) {
            bit = (int)i;
            break;
        }
    }
    if (bit < 0) {
        if (n >= MAX_KEY_NAMES)
            return unusual("trace entries with more than 64 distinct keys", at);
        if (PyList_Append(s->key_names, k) < 0)
            return -1;
        bit = (int)n;
    }
    for (int i = 0; i < s->nkeys; i++)
        if (s->keys[i].key == k)
            s->keys[i].name = bit;
    return bit;
}

static int action_code(Scanner *s, PyObject *a, long long at)
{
    for (int i = 0; i < s->nact; i++)
        if (s->act_key[i] == a)
            return s->act_code[i];
    PyObject *c = PyDict_GetItemWithError(s->codes, a);
    if (c == NULL) {
        if (PyErr_Occurred())
            return -1;
        /* An action not known: the next code, in order of first appearance, as the tree
         * reader appends it to action_names (codes is its dict, by insertion order). */
        Py_ssize_t n = PyDict_GET_SIZE(s->codes);
        if (n > 255)
            return unusual("more than 256 distinct actions", at);
        PyObject *k = PyLong_FromSsize_t(n);
        if (!k || PyDict_SetItem(s->codes, a, k) < 0) {
            Py_XDECREF(k);
            return -1;
        }
        Py_DECREF(k);
        return (int)n; /* not cached: the pointer cache holds the usual ones */
    }
    long v = PyLong_AsLong(c);
    if (v < 0 || v > 255) {
        if (!PyErr_Occurred())
            unusual("an action code out of range", at);
        return -1;
    }
    if (s->nact < 32) {
        Py_INCREF(a);
        s->act_key[s->nact] = a;
        s->act_code[s->nact++] = (int)v;
    }
    return (int)v;
}

static int int_value(PyObject *v, int none_ok, int64_t absent, int64_t *out)
{
    if (v == NULL) {
        *out = absent;
        return 1;
    }
    if (v == Py_None && none_ok) {
        *out = absent;
        return 1;
    }
    if (!PyLong_CheckExact(v))
        return 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = x;
    return 1;
}

static int32_t intern_str(PyObject *ids, PyObject *strs, PyObject *v)
{
    PyObject *i = PyDict_GetItemWithError(ids, v);
    if (i)
        return (int32_t)PyLong_AsLong(i);
    if (PyErr_Occurred())
        return -2;
    Py_ssize_t n = PyList_GET_SIZE(strs);
    PyObject *k = PyLong_FromSsize_t(n);
    if (!k || PyDict_SetItem(ids, v, k) < 0 || PyList_Append(strs, v) < 0) {
        Py_XDECREF(k);
        return -2;
    }
    Py_DECREF(k);
    return (int32_t)n;
}

/* The row columns resized to c rows. */
static int reserve_rows(Scanner *s, Py_ssize_t c)
{
#define RE(f, t)                                                    \
    do {                                                            \
        void *q = realloc(s->f, (size_t)c * sizeof(t));             \
        if (!q) {                                                   \
            PyErr_NoMemory();                                       \
            return -1;                                              \
        }                                                           \
        s->f = q;                                                   \
    } while (0)
    RE(action, uint8_t);
    RE(layout, uint8_t);
    RE(addr, int64_t);
    RE(size, int64_t);
    RE(stream, int64_t);
    RE(time_us, int64_t);
    RE(dfree, int64_t);
    RE(frames, int32_t);
    RE(cc, int32_t);
    RE(um, int32_t);
#undef RE
    s->rcap = c;
    return 0;
}

static inline int grow_rows(Scanner *s)
{
    if (s->nrows < s->rcap)
        return 0;
    return reserve_rows(s, s->rcap ? s->rcap * 2 : 65536);
}

/* A value of a trace entry: an object (NULL: the key is absent) or, read straight from
 * the bytes by fast_entry, an int. */
typedef struct {
    PyObject *o;
    int64_t i;
    int is_int;
} Val;

static int val_int(const Val *v, int none_ok, int64_t absent, int64_t *out)
{
    if (v->is_int) {
        *out = v->i;
        return 1;
    }
    return int_value(v->o, none_ok, absent, out);
}

/* The row of an entry with these values (val[f] for each field, the last of a key
 * repeated) and keys (mask of key bits). Returns its traceback id (0: none), -1 on error. */
static int32_t add_row(Scanner *s, const Val *val, uint64_t mask, long long at)
{
    PyObject *a = val[F_ACTION].o;
    if (val[F_ACTION].is_int || !a || !PyUnicode_CheckExact(a))
        return unusual("an action that is not a string", at);
    int code = action_code(s, a, at);
    if (code < 0)
        return -1;
    int64_t addr, size, stream, t, df = -1;
    if (!val_int(&val[F_ADDR], 0, 0, &addr) || !val_int(&val[F_SIZE], 0, 0, &size) ||
        !val_int(&val[F_STREAM], 0, 0, &stream) || !val_int(&val[F_TIME], 1, NO_TIME, &t))
        return unusual("a trace entry number that is not an int of 64 bits", at);
    if (code == OOM_CODE && !val_int(&val[F_DFREE], 1, 0, &df))
        return unusual("an oom entry whose device_free is not an int", at);
    int32_t cc = -1, um = -1;
    PyObject *c = val[F_CC].o, *u = val[F_UM].o;
    if (val[F_CC].is_int || val[F_UM].is_int || val[F_FRAMES].is_int)
        return unusual("a trace entry string or frames that is an int", at);
    if (c && c != Py_None) {
        if (!PyUnicode_CheckExact(c))
            return unusual("a compile_context that is not a string", at);
        if (c == s->cc_last)
            cc = s->cc_last_id;
        else if ((cc = intern_str(s->cc_ids, s->cc_strs, c)) == -2)
            return -1;
        else {
            s->cc_last = PyList_GET_ITEM(s->cc_strs, cc);
            s->cc_last_id = cc;
        }
    }
    if (u && u != Py_None) {
        if (!PyUnicode_CheckExact(u))
            return unusual("a user_metadata that is not a string", at);
        if (u == s->um_last)
            um = s->um_last_id;
        else if ((um = intern_str(s->um_ids, s->um_strs, u)) == -2)
            return -1;
        else {
            s->um_last = PyList_GET_ITEM(s->um_strs, um);
            s->um_last_id = um;
        }
    }
    int32_t fr = 0;
    PyObject *f = val[F_FRAMES].o;
    if (f && f != Py_None) {
        if (!PyList_CheckExact(f))
            return unusual("frames that are not a list", at);
        if (PyList_GET_SIZE(f) ? (fr = traceback_id(s, f)) < 0 : freeze_empty(s, f) < 0)
            return -1;
    }
    int li = -1;
    for (int i = 0; i < s->nlayouts; i++)
        if (s->layouts[i] == mask) {
            li = i;
            break;
        }
    if (li < 0) {
        if (s->nlayouts >= MAX_LAYOUTS)
            return unusual("trace entries with too many key layouts", at);
        s->layouts[li = s->nlayouts++] = mask;
    }
    if (grow_rows(s) < 0)
        return -1;
    Py_ssize_t r = s->nrows++;
    s->action[r] = (uint8_t)code;
    s->layout[r] = (uint8_t)li;
    s->addr[r] = addr;
    s->size[r] = size;
    s->stream[r] = stream;
    s->time_us[r] = t;
    s->dfree[r] = code == OOM_CODE ? df : -1;
    s->frames[r] = fr;
    s->cc[r] = cc;
    s->um[r] = um;
    s->pending++;
    return fr;
}

/* SETITEMS on a fresh dict that sits in a list being built and has an "action" key:
 * the entry becomes a row. Returns 1 when done, 0 when the dict is no entry (built as a
 * dict), -1 on error (Unusual: read the file the other way). */
static int entry_row(Scanner *s, Py_ssize_t mark, long long at)
{
    Py_ssize_t d = mark - 1;
    PyObject *dict = s->stack[d];
    if (!PyDict_CheckExact(dict) || PyDict_GET_SIZE(dict) != 0 || d < 1)
        return 0;
    PyObject *below = s->stack[d - 1];
    if (below != ROW && !PyList_CheckExact(below))
        return 0;
    Val val[N_FIELDS];
    memset(val, 0, sizeof(val));
    Py_ssize_t frames_at = -1;
    int is_entry = 0;
    for (Py_ssize_t i = mark; i < s->sp; i += 2) {
        PyObject *k = s->stack[i];
        if (!PyUnicode_CheckExact(k))
            continue;
        int name;
        if (key_field(s, k, &name) == F_ACTION)
            is_entry = 1;
    }
    if (!is_entry)
        return 0;
    uint64_t mask = 0;
    for (Py_ssize_t i = mark; i < s->sp; i += 2) {
        PyObject *k = s->stack[i], *v = s->stack[i + 1];
        if (!PyUnicode_CheckExact(k))
            return unusual("a trace entry with a key that is not a string", at);
        if (v == ROW)
            return unusual("a trace entry inside a trace entry", at);
        int name;
        int f = key_field(s, k, &name);
        int bit = key_bit(s, k, at);
        if (bit < 0)
            return -1;
        mask |= (uint64_t)1 << bit;
        val[f].o = v; /* the last one wins, as in a dict */
        if (f == F_FRAMES)
            frames_at = i + 1;
    }
    /* The dict itself: on the stack and at most once in the memo, nowhere else. */
    int32_t dsl = s->slot[d];
    if (dsl == -2 || Py_REFCNT(dict) != 1 + (dsl >= 0) || (dsl >= 0 && s->memo[dsl] != dict))
        return unusual("a trace entry referred to elsewhere", at);
    int32_t fr = add_row(s, val, mask, at);
    if (fr < 0)
        return -1;
    if (fr > 0) {
        /* A new list the memo holds (and nothing else): the memo keeps the first list
         * of these frames instead, so equal tracebacks cost one list. */
        PyObject *f = val[F_FRAMES].o, *rep = PyList_GET_ITEM(s->reps, fr - 1);
        int32_t sl = s->slot[frames_at];
        if (rep != f && sl >= 0 && Py_REFCNT(f) == 2 && s->memo[sl] == f) {
            Py_INCREF(rep);
            s->memo[sl] = rep;
            Py_DECREF(f);
        }
    }
    pop_to(s, mark);
    if (dsl >= 0) {
        Py_INCREF(CONSUMED);
        s->memo[dsl] = CONSUMED;
        Py_DECREF(dict);
    }
    Py_INCREF(ROW);
    s->stack[d] = ROW;
    s->slot[d] = -1;
    Py_DECREF(dict);
    return 1;
}

/* -- trace entries straight from the bytes -------------------------------------------------
 * The usual entry, as the C pickler writes it: EMPTY_DICT, its memo put, MARK, then
 * (key value)* and SETITEMS, FRAME possibly between any two opcodes; every key a memo
 * reference to a string; every value a memo reference, an int (BININT1/2/4, LONG1 of at
 * most 8 bytes), None/True/False, a new short string (SHORT_BINUNICODE, maybe put), or a
 * new list of memo references (EMPTY_LIST, maybe put, then MARK refs APPENDS or ref
 * APPEND, any number of times). fast_entry reads such an entry without building its dict,
 * its ints or (when a list of the same frames was seen) its traceback, and does what the
 * opcodes would: the same memo puts, the same row as entry_row. Anything else, a memo
 * reference to a slot the entry itself puts included, is left to the opcode loop. */

#define FE_PAIRS 32
#define FE_ITEMS 4096
#define FE_PUTS 40
#define FE_FRAMES 8

enum { V_OBJ, V_INT, V_STR, V_LIST };

typedef struct {
    PyObject *key;
    int field, kind;
    PyObject *o;        /* V_OBJ (borrowed) */
    int64_t i;          /* V_INT */
    Py_ssize_t off, n;  /* V_STR: bytes; V_LIST: items[off:off+n] */
    int put;            /* index into puts, -1 none */
} FePair;

typedef struct {
    Py_ssize_t slot;
} FePut;

static int pending_has(const FePut *puts, int n, Py_ssize_t idx)
{
    for (int i = 0; i < n; i++)
        if (puts[i].slot == idx)
            return 1;
    return 0;
}

/* Returns the bytes the entry took (>0), 0 to leave it to the opcode loop, -2 for more
 * bytes, -1 on error. */
static Py_ssize_t fast_entry(Scanner *s, Py_ssize_t p0)
{
    const uint8_t *b = s->buf;
    Py_ssize_t end = s->len, q = p0 + 1;
    FePair pairs[FE_PAIRS];
    FePut puts[FE_PUTS];
    PyObject *items[FE_ITEMS];
    int np = 0, nputs = 0, nframes = 0, nitems = 0;
    Py_ssize_t vfilled = s->mfilled;
    long long frame_end = s->frame_end;
    int dict_put = -1;
#define NEED(k)                                                     \
    do {                                                            \
        if (end - q < (Py_ssize_t)(k))                              \
            return end - p0 < (1 << 17) ? -2 : 0;                   \
    } while (0)
#define FRAMES()                                                    \
    while (q < end && b[q] == 0x95) {                               \
        NEED(9);                                                    \
        uint64_t fk = le(b + q + 1, 8);                             \
        if (fk > (uint64_t)MAX_FIELD_BYTES || ++nframes > FE_FRAMES) \
            return 0;                                               \
        frame_end = s->base + q + 9 + (long long)fk;                \
        q += 9;                                                     \
    }
    /* a memo put at q, if any: -> index into puts (-1 none), or returns 0 */
#define PUT(dst)                                                                    \
    do {                                                                            \
        FRAMES();                                                                   \
        NEED(1);                                                                    \
        (dst) = -1;                                                                 \
        Py_ssize_t idx = -1;                                                        \
        if (b[q] == 0x94) {                                                         \
            idx = vfilled;                                                          \
            q += 1;                                                                 \
        } else if (b[q] == 'q') {                                                   \
            NEED(2);                                                                \
            idx = b[q + 1];                                                         \
            q += 2;                                                                 \
        } else if (b[q] == 'r') {                                                   \
            NEED(5);                                                                \
            idx = (Py_ssize_t)le(b + q + 1, 4);                                     \
            q += 5;                                                                 \
        }                                                                           \
        if (idx >= 0) {                                                             \
            if (nputs >= FE_PUTS || idx > vfilled + 64)                             \
                return 0;                                                           \
            int filled = (idx < s->msize && s->memo[idx]) || pending_has(puts, nputs, idx); \
            puts[nputs].slot = idx;                                                 \
            (dst) = nputs++;                                                        \
            if (!filled)                                                            \
                vfilled++;                                                          \
        }                                                                           \
    } while (0)
    /* a memo reference at q: -> obj (borrowed), or returns 0 */
#define REF(obj)                                                                    \
    do {                                                                            \
        Py_ssize_t idx;                                                             \
        NEED(2);                                                                    \
        if (b[q] == 'h') {                                                          \
            idx = b[q + 1];                                                         \
            q += 2;                                                                 \
        } else if (b[q] == 'j') {                                                   \
            NEED(5);                                                                \
            idx = (Py_ssize_t)le(b + q + 1, 4);                                     \
            q += 5;                                                                 \
        } else                                                                      \
            return 0;                                                               \
        if (idx >= s->msize || !s->memo[idx] || s->memo[idx] == CONSUMED || pending_has(puts, nputs, idx)) \
            return 0;                                                               \
        (obj) = s->memo[idx];                                                       \
    } while (0)

    if (s->nmarks + 2 > MAX_MARKS)
        return 0;
    PUT(dict_put);
    FRAMES();
    NEED(1);
    if (b[q] != '(')
        return 0;
    q++;
    for (;;) {
        FRAMES();
        NEED(1);
        if (b[q] == 'u') {
            q++;
            break;
        }
        if (np >= FE_PAIRS)
            return 0;
        FePair *pr = &pairs[np++];
        REF(pr->key);
        if (!PyUnicode_CheckExact(pr->key))
            return 0;
        pr->put = -1;
        FRAMES();
        NEED(1);
        uint8_t op = b[q];
        switch (op) {
        case 'h':
        case 'j':
            pr->kind = V_OBJ;
            REF(pr->o);
            break;
        case 'N':
        case 0x88:
        case 0x89:
            pr->kind = V_OBJ;
            pr->o = op == 'N' ? Py_None : op == 0x88 ? Py_True : Py_False;
            q++;
            break;
        case 'K':
            NEED(2);
            pr->kind = V_INT;
            pr->i = b[q + 1];
            q += 2;
            break;
        case 'M':
            NEED(3);
            pr->kind = V_INT;
            pr->i = (int64_t)le(b + q + 1, 2);
            q += 3;
            break;
        case 'J':
            NEED(5);
            pr->kind = V_INT;
            pr->i = (int32_t)(uint32_t)le(b + q + 1, 4);
            q += 5;
            break;
        case 0x8A: {
            NEED(2);
            int k = b[q + 1];
            if (k > 8)
                return 0;
            NEED(2 + k);
            uint64_t v = le(b + q + 2, k);
            if (k > 0 && k < 8 && (b[q + 1 + k] & 0x80))
                v |= ~(uint64_t)0 << (8 * k);
            pr->kind = V_INT;
            pr->i = (int64_t)v;
            q += 2 + k;
            break;
        }
        case 0x8C: {
            NEED(2);
            Py_ssize_t k = b[q + 1];
            NEED(2 + k);
            pr->kind = V_STR;
            pr->off = q + 2;
            pr->n = k;
            q += 2 + k;
            PUT(pr->put);
            break;
        }
        case ']': {
            q++;
            pr->kind = V_LIST;
            pr->off = nitems;
            PUT(pr->put);
            for (;;) {
                FRAMES();
                NEED(1);
                if (b[q] == '(') {
                    q++;
                    for (;;) {
                        FRAMES();
                        NEED(1);
                        if (b[q] == 'e') {
                            q++;
                            break;
                        }
                        if (nitems >= FE_ITEMS)
                            return 0;
                        REF(items[nitems]);
                        nitems++;
                    }
                } else if (b[q] == 'h' || b[q] == 'j') { /* ref APPEND, or the next key */
                    Py_ssize_t back = q;
                    if (nitems >= FE_ITEMS)
                        return 0;
                    REF(items[nitems]);
                    FRAMES();
                    NEED(1);
                    if (b[q] != 'a') {
                        q = back;
                        break;
                    }
                    nitems++;
                    q++;
                } else
                    break;
            }
            pr->n = nitems - pr->off;
            break;
        }
        default:
            return 0;
        }
    }
#undef NEED
#undef FRAMES
#undef PUT
#undef REF
    long long at = s->base + p0;
    int is_entry = 0;
    for (int i = 0; i < np; i++) {
        int name;
        pairs[i].field = key_field(s, pairs[i].key, &name);
        is_entry |= pairs[i].field == F_ACTION;
    }
    if (!is_entry)
        return 0;
    /* From here on the entry is taken (or the file left to the tree reader). */
    PyObject *made[FE_PAIRS];
    int nmade = 0;
    Val val[N_FIELDS];
    memset(val, 0, sizeof(val));
    uint64_t mask = 0;
    int frames_pair = -1;
    int ret = -1;
    for (int i = 0; i < np; i++) {
        FePair *pr = &pairs[i];
        int bit = key_bit(s, pr->key, at);
        if (bit < 0)
            goto done;
        mask |= (uint64_t)1 << bit;
        Val v = {NULL, 0, 0};
        if (pr->kind == V_OBJ)
            v.o = pr->o;
        else if (pr->kind == V_INT) {
            v.i = pr->i;
            v.is_int = 1;
        } else {
            PyObject *o = NULL;
            if (pr->kind == V_STR) {
                o = PyUnicode_DecodeUTF8((const char *)b + pr->off, pr->n, "surrogatepass");
                if (!o) {
                    if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                        PyErr_Clear();
                        unusual("a string that is not UTF-8", at);
                    }
                    goto done;
                }
            } else {
                if (pr->field == F_FRAMES && pr->n) { /* the first list of the same frames, if any */
                    uint64_t h = (uint64_t)pr->n;
                    for (Py_ssize_t k = 0; k < pr->n; k++)
                        h = mix(h, (uint64_t)(uintptr_t)items[pr->off + k]);
                    if (s->rtcap) {
                        Py_ssize_t m = s->rtcap - 1, j = (Py_ssize_t)(h & (uint64_t)m);
                        for (; s->rtab[j].id; j = (j + 1) & m) {
                            if (s->rtab[j].hash != h)
                                continue;
                            PyObject *r = PyList_GET_ITEM(s->reps, s->rtab[j].id - 1);
                            if (PyList_GET_SIZE(r) == pr->n &&
                                memcmp(((PyListObject *)r)->ob_item, items + pr->off, pr->n * sizeof(PyObject *)) == 0) {
                                Py_INCREF(r);
                                o = r;
                                break;
                            }
                        }
                    }
                }
                if (!o && pr->field == F_FRAMES && !pr->n) {
                    Py_INCREF(s->empty_list); /* one frozen empty list for every empty traceback */
                    o = s->empty_list;
                }
                if (!o) {
                    if (!(o = PyList_New(pr->n)))
                        goto done;
                    for (Py_ssize_t k = 0; k < pr->n; k++) {
                        Py_INCREF(items[pr->off + k]);
                        PyList_SET_ITEM(o, k, items[pr->off + k]);
                    }
                }
            }
            made[nmade++] = o;
            v.o = o;
        }
        val[pr->field] = v;
        if (pr->field == F_FRAMES)
            frames_pair = i;
    }
    (void)frames_pair;
    if (add_row(s, val, mask, at) < 0)
        goto done;
    /* the memo puts, in the order of the bytes */
    for (int i = 0; i < nputs; i++) {
        PyObject *o = CONSUMED;
        if (i != dict_put) {
            o = NULL;
            for (int k = 0, m = 0; k < np; k++) {
                if (pairs[k].kind == V_STR || pairs[k].kind == V_LIST) {
                    if (pairs[k].put == i)
                        o = made[m];
                    m++;
                }
            }
        }
        if (!o || memo_set(s, puts[i].slot, o) < 0)
            goto done;
    }
    s->frame_end = frame_end;
    Py_INCREF(ROW);
    if (push(s, ROW) < 0)
        goto done;
    s->fast_rows++;
    ret = 0;
done:
    for (int i = 0; i < nmade; i++)
        Py_DECREF(made[i]);
    return ret < 0 ? -1 : q - p0;
}

/* APPEND(S) of k rows (the last k made) to list l. */
static int rows_to_list(Scanner *s, PyObject *l, Py_ssize_t k, long long at)
{
    if (k != s->pending || PyList_GET_SIZE(l) != 0)
        return unusual("trace entries mixed with other items", at);
    if (rset_has(s, l))
        return unusual("trace entries appended to a traceback", at);
    Py_ssize_t start = s->nrows - k;
    PyObject *key = PyLong_FromVoidPtr(l);
    if (!key)
        return -1;
    PyObject *rec = PyDict_GetItemWithError(s->row_lists, key);
    if (rec) {
        Py_ssize_t end = PyLong_AsSsize_t(PyList_GET_ITEM(rec, 2));
        if (end != start) {
            Py_DECREF(key);
            return unusual("a trace list whose entries are not in one run", at);
        }
        PyObject *e = PyLong_FromSsize_t(s->nrows);
        if (!e || PyList_SetItem(rec, 2, e) < 0) {
            Py_DECREF(key);
            return -1;
        }
    } else {
        if (PyErr_Occurred()) {
            Py_DECREF(key);
            return -1;
        }
        rec = Py_BuildValue("[Onn]", l, start, s->nrows);
        if (!rec || PyDict_SetItem(s->row_lists, key, rec) < 0) {
            Py_XDECREF(rec);
            Py_DECREF(key);
            return -1;
        }
        Py_DECREF(rec);
    }
    Py_DECREF(key);
    s->pending = 0;
    return 0;
}

/* -- the opcode loop -------------------------------------------------------------------- */


/* Runs opcodes while whole ones are in the buffer: 1 at STOP, 0 for more bytes, -1 error. */
static int run(Scanner *s)
{
    const uint8_t *b = s->buf;
    Py_ssize_t n = s->len;
    for (;;) {
        Py_ssize_t p = s->pos;
        long long at = s->base + p;
        if (p >= n)
            return 0;
        uint8_t op = b[p];
        Py_ssize_t avail = n - p;
        int was_int = 0;
#define NEED(k)                   \
    do {                          \
        if (avail < (Py_ssize_t)(k)) \
            return 0;             \
    } while (0)
        switch (op) {
        case 0x80: /* PROTO */
            NEED(2);
            if (at != 0 || b[p + 1] < 2 || b[p + 1] > 5)
                return unusual("a PROTO opcode not at the start, or a protocol not 2-5", at);
            s->pos = p + 2;
            break;
        case 0x95: { /* FRAME */
            NEED(9);
            uint64_t k = le(b + p + 1, 8);
            if (k > (uint64_t)MAX_FIELD_BYTES)
                return unusual("a frame over the field limit", at);
            s->frame_end = at + 9 + (long long)k;
            s->pos = p + 9;
            break;
        }
        case '(': /* MARK */
            if (s->nmarks >= MAX_MARKS)
                return unusual("containers nested too deep", at);
            s->marks[s->nmarks++] = s->sp;
            s->pos = p + 1;
            break;
        case '}':
            if (s->sp && (s->stack[s->sp - 1] == ROW || PyList_CheckExact(s->stack[s->sp - 1]))) {
                Py_ssize_t k = fast_entry(s, p);
                if (k == -2)
                    return 0;
                if (k < 0)
                    return -1;
                if (k > 0) {
                    s->pos = p + k;
                    break;
                }
            }
            if (push(s, PyDict_New()) < 0)
                return -1;
            s->pos = p + 1;
            break;
        case ']':
            if (push(s, PyList_New(0)) < 0)
                return -1;
            s->pos = p + 1;
            break;
        case ')':
            if (push(s, PyTuple_New(0)) < 0)
                return -1;
            s->pos = p + 1;
            break;
        case 'N':
            Py_INCREF(Py_None);
            if (push(s, Py_None) < 0)
                return -1;
            s->pos = p + 1;
            break;
        case 0x88:
        case 0x89: {
            PyObject *v = op == 0x88 ? Py_True : Py_False;
            Py_INCREF(v);
            if (push(s, v) < 0)
                return -1;
            s->pos = p + 1;
            break;
        }
        case 'K':
            NEED(2);
            if (push(s, PyLong_FromLong(b[p + 1])) < 0)
                return -1;
            s->pos = p + 2;
            was_int = 1;
            break;
        case 'M':
            NEED(3);
            if (push(s, PyLong_FromLong((long)le(b + p + 1, 2))) < 0)
                return -1;
            s->pos = p + 3;
            was_int = 1;
            break;
        case 'J':
            NEED(5);
            if (push(s, PyLong_FromLong((long)(int32_t)(uint32_t)le(b + p + 1, 4))) < 0)
                return -1;
            s->pos = p + 5;
            was_int = 1;
            break;
        case 0x8A: { /* LONG1 */
            NEED(2);
            int k = b[p + 1];
            if (k > 8)
                return unusual("an int wider than 64 bits", at);
            NEED(2 + k);
            uint64_t v = le(b + p + 2, k);
            if (k > 0 && k < 8 && (b[p + 1 + k] & 0x80))
                v |= ~(uint64_t)0 << (8 * k);
            if (push(s, PyLong_FromLongLong((long long)v)) < 0)
                return -1;
            s->pos = p + 2 + k;
            break;
        }
        case 'G': { /* BINFLOAT */
            NEED(9);
            double d = PyFloat_Unpack8((const char *)b + p + 1, 0);
            if (d == -1.0 && PyErr_Occurred())
                return -1;
            if (push(s, PyFloat_FromDouble(d)) < 0)
                return -1;
            s->pos = p + 9;
            break;
        }
        case 0x8C: /* SHORT_BINUNICODE */
        case 'X':  /* BINUNICODE */
        case 0x8D: /* BINUNICODE8 */
        case 'C':  /* SHORT_BINBYTES */
        case 'B':  /* BINBYTES */
        case 0x8E: /* BINBYTES8 */ {
            int w = (op == 0x8C || op == 'C') ? 1 : (op == 'X' || op == 'B') ? 4 : 8;
            NEED(1 + w);
            uint64_t k = le(b + p + 1, w);
            if (k > (uint64_t)MAX_FIELD_BYTES)
                return unusual("a string or bytes over the field limit", at);
            NEED(1 + w + (Py_ssize_t)k);
            const char *str = (const char *)b + p + 1 + w;
            PyObject *v;
            if (op == 'C' || op == 'B' || op == 0x8E)
                v = PyBytes_FromStringAndSize(str, (Py_ssize_t)k);
            else
                v = PyUnicode_DecodeUTF8(str, (Py_ssize_t)k, "surrogatepass");
            if (v == NULL) {
                if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                    PyErr_Clear();
                    return unusual("a string that is not UTF-8", at);
                }
                return -1;
            }
            if (push(s, v) < 0)
                return -1;
            s->pos = p + 1 + w + (Py_ssize_t)k;
            break;
        }
        case 0x86: { /* TUPLE2: a pair of ints only (safe_pickle.Prescan reroutes others) */
            if (!s->prev_int || !s->prev_int2 || s->sp < 2)
                return unusual("a tuple that is not a pair of ints", at);
            PyObject *x = s->stack[s->sp - 2], *y = s->stack[s->sp - 1];
            PyObject *t = PyTuple_Pack(2, x, y);
            if (!t)
                return -1;
            pop_to(s, s->sp - 2);
            if (push(s, t) < 0)
                return -1;
            s->pos = p + 1;
            break;
        }
        case 0x94: /* MEMOIZE */
            if (memo_put(s, s->mfilled, at) < 0)
                return -1;
            s->pos = p + 1;
            break;
        case 'q':
            NEED(2);
            if (memo_put(s, b[p + 1], at) < 0)
                return -1;
            s->pos = p + 2;
            break;
        case 'r':
            NEED(5);
            if (memo_put(s, (Py_ssize_t)le(b + p + 1, 4), at) < 0)
                return -1;
            s->pos = p + 5;
            break;
        case 'h':
            NEED(2);
            if (memo_get(s, b[p + 1], at) < 0)
                return -1;
            s->pos = p + 2;
            break;
        case 'j':
            NEED(5);
            if (memo_get(s, (Py_ssize_t)le(b + p + 1, 4), at) < 0)
                return -1;
            s->pos = p + 5;
            break;
        case 'a': { /* APPEND */
            Py_ssize_t floor = s->nmarks ? s->marks[s->nmarks - 1] : 0;
            if (s->sp - floor < 2 || !PyList_CheckExact(s->stack[s->sp - 2]))
                return unusual("APPEND to something not a list", at);
            PyObject *l = s->stack[s->sp - 2], *v = s->stack[s->sp - 1];
            if (v == ROW) {
                if (rows_to_list(s, l, 1, at) < 0)
                    return -1;
            } else {
                if (rset_has(s, l))
                    return unusual("a traceback list grown after use", at);
                if (PyList_Append(l, v) < 0)
                    return -1;
            }
            pop_to(s, s->sp - 1);
            s->pos = p + 1;
            break;
        }
        case 'e': { /* APPENDS */
            if (!s->nmarks)
                return unusual("APPENDS without a MARK", at);
            Py_ssize_t m = s->marks[--s->nmarks];
            if (m < 1 || !PyList_CheckExact(s->stack[m - 1]))
                return unusual("APPENDS to something not a list", at);
            PyObject *l = s->stack[m - 1];
            Py_ssize_t rows = 0;
            for (Py_ssize_t i = m; i < s->sp; i++)
                rows += s->stack[i] == ROW;
            if (rows) {
                if (rows != s->sp - m)
                    return unusual("trace entries mixed with other items", at);
                if (rows_to_list(s, l, rows, at) < 0)
                    return -1;
            } else if (s->sp > m) {
                if (rset_has(s, l))
                    return unusual("a traceback list grown after use", at);
                for (Py_ssize_t i = m; i < s->sp; i++)
                    if (PyList_Append(l, s->stack[i]) < 0)
                        return -1;
            }
            pop_to(s, m);
            s->pos = p + 1;
            break;
        }
        case 's': { /* SETITEM */
            Py_ssize_t floor = s->nmarks ? s->marks[s->nmarks - 1] : 0;
            if (s->sp - floor < 3 || !PyDict_CheckExact(s->stack[s->sp - 3]))
                return unusual("SETITEM on something not a dict", at);
            PyObject *k = s->stack[s->sp - 2], *v = s->stack[s->sp - 1];
            if (k == ROW || v == ROW)
                return unusual("a trace entry as a dict key or value", at);
            if (PyDict_SetItem(s->stack[s->sp - 3], k, v) < 0) {
                if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                    PyErr_Clear();
                    return unusual("an unhashable key", at);
                }
                return -1;
            }
            pop_to(s, s->sp - 2);
            s->pos = p + 1;
            break;
        }
        case 'u': { /* SETITEMS */
            if (!s->nmarks)
                return unusual("SETITEMS without a MARK", at);
            Py_ssize_t m = s->marks[s->nmarks - 1];
            if (m < 1 || !PyDict_CheckExact(s->stack[m - 1]) || (s->sp - m) % 2)
                return unusual("SETITEMS on something not a dict", at);
            s->nmarks--;
            int r = entry_row(s, m, at);
            if (r < 0)
                return -1;
            if (r == 0) {
                PyObject *dict = s->stack[m - 1];
                for (Py_ssize_t i = m; i < s->sp; i += 2) {
                    PyObject *k = s->stack[i], *v = s->stack[i + 1];
                    if (k == ROW || v == ROW)
                        return unusual("a trace entry as a dict key or value", at);
                    if (PyDict_SetItem(dict, k, v) < 0) {
                        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                            PyErr_Clear();
                            return unusual("an unhashable key", at);
                        }
                        return -1;
                    }
                }
                pop_to(s, m);
            }
            s->pos = p + 1;
            break;
        }
        case '.': /* STOP */
            if (s->sp != 1 || s->nmarks || s->stack[0] == ROW || s->pending)
                return unusual("STOP with a stack other than one object", at);
            if (s->frame_end > at + 1)
                return unusual("a frame longer than the pickle", at);
            s->result = s->stack[0];
            s->sp = 0;
            s->pos = p + 1;
            s->done = 1;
            return 1;
        default:
            return unusual("an opcode this reader leaves to the tree reader", at);
        }
#undef NEED
        s->prev_int2 = s->prev_int;
        s->prev_int = was_int;
    }
}

/* -- the type ----------------------------------------------------------------------------- */

static int Scanner_init(Scanner *s, PyObject *args, PyObject *kw)
{
    PyObject *codes;
    Py_ssize_t hint = 0;
    if (!PyArg_ParseTuple(args, "O!|n", &PyDict_Type, &codes, &hint))
        return -1;
    /* hint: the bytes of the pickle (the file's size, not a number in it). A generated
     * or real trace entry takes 100-150 bytes; the columns are reserved for that many
     * (untouched pages cost nothing) so that they rarely move while they grow. */
    if (hint > 0) {
        Py_ssize_t rows = hint / 128;
        if (rows > ((Py_ssize_t)1 << 28))
            rows = (Py_ssize_t)1 << 28;
        if (rows > 65536 && reserve_rows(s, rows) < 0)
            return -1;
    }
    Py_INCREF(codes);
    s->codes = codes;
    s->key_names = PyList_New(0);
    s->reps = PyList_New(0);
    s->cc_ids = PyDict_New();
    s->cc_strs = PyList_New(0);
    s->um_ids = PyDict_New();
    s->um_strs = PyList_New(0);
    s->row_lists = PyDict_New();
    memset(s->kidx, 0xFF, sizeof(s->kidx));
    s->frozen = PyList_New(0);
    s->empty_list = PyList_New(0);
    if (!s->frozen || !s->empty_list || freeze_empty(s, s->empty_list) < 0)
        return -1;
    if (!s->key_names || !s->reps || !s->cc_ids || !s->cc_strs || !s->um_ids || !s->um_strs || !s->row_lists)
        return -1;
    return 0;
}

static void free_rows(Scanner *s)
{
    free(s->action);
    free(s->layout);
    free(s->addr);
    free(s->size);
    free(s->stream);
    free(s->time_us);
    free(s->dfree);
    free(s->frames);
    free(s->cc);
    free(s->um);
    s->action = s->layout = NULL;
    s->addr = s->size = s->stream = s->time_us = s->dfree = NULL;
    s->frames = s->cc = s->um = NULL;
    s->nrows = s->rcap = 0;
}

static void Scanner_dealloc(Scanner *s)
{
    pop_to(s, 0);
    free(s->stack);
    free(s->slot);
    for (Py_ssize_t i = 0; i < s->msize; i++)
        Py_XDECREF(s->memo[i]);
    free(s->memo);
    free(s->buf);
    free_rows(s);
    free(s->rtab);
    free(s->rset);
    for (int i = 0; i < s->nkeys; i++)
        Py_DECREF(s->keys[i].key);
    for (int i = 0; i < s->nact; i++)
        Py_DECREF(s->act_key[i]);
    Py_XDECREF(s->result);
    Py_XDECREF(s->codes);
    Py_XDECREF(s->key_names);
    Py_XDECREF(s->reps);
    Py_XDECREF(s->cc_ids);
    Py_XDECREF(s->cc_strs);
    Py_XDECREF(s->um_ids);
    Py_XDECREF(s->um_strs);
    Py_XDECREF(s->row_lists);
    Py_XDECREF(s->frozen);
    Py_XDECREF(s->empty_list);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *Scanner_feed(Scanner *s, PyObject *arg)
{
    Py_buffer view;
    if (s->done) {
        PyErr_SetString(PyExc_ValueError, "_pickle_scan: fed after STOP");
        return NULL;
    }
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (s->pos) { /* drop what was read */
        memmove(s->buf, s->buf + s->pos, (size_t)(s->len - s->pos));
        s->base += s->pos;
        s->len -= s->pos;
        s->pos = 0;
    }
    if (grow((void **)&s->buf, &s->cap, s->len + view.len + 1, 1) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    memcpy(s->buf + s->len, view.buf, (size_t)view.len);
    s->len += view.len;
    PyBuffer_Release(&view);
    int r = run(s);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}

/* fill(stream, n): up to n more bytes read by stream.readinto straight into the buffer
 * (no copy), then the opcodes run: -> (bytes read, True once STOP is read). */
static PyObject *Scanner_fill(Scanner *s, PyObject *args)
{
    PyObject *stream;
    Py_ssize_t want;
    if (!PyArg_ParseTuple(args, "On", &stream, &want))
        return NULL;
    if (s->done || want <= 0) {
        PyErr_SetString(PyExc_ValueError, "_pickle_scan: fill after STOP, or of nothing");
        return NULL;
    }
    if (s->pos) {
        memmove(s->buf, s->buf + s->pos, (size_t)(s->len - s->pos));
        s->base += s->pos;
        s->len -= s->pos;
        s->pos = 0;
    }
    if (grow((void **)&s->buf, &s->cap, s->len + want + 1, 1) < 0)
        return NULL;
    PyObject *mv = PyMemoryView_FromMemory((char *)s->buf + s->len, want, PyBUF_WRITE);
    if (!mv)
        return NULL;
    PyObject *got = PyObject_CallMethod(stream, "readinto", "O", mv);
    /* whatever the stream kept of the view must not reach the buffer once it moves */
    PyObject *rel = PyObject_CallMethod(mv, "release", NULL);
    Py_DECREF(mv);
    if (!got || !rel) {
        Py_XDECREF(got);
        Py_XDECREF(rel);
        return NULL;
    }
    Py_DECREF(rel);
    Py_ssize_t n = got == Py_None ? 0 : PyLong_AsSsize_t(got);
    Py_DECREF(got);
    if (n < 0 || n > want) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "_pickle_scan: readinto returned a wrong count");
        return NULL;
    }
    s->len += n;
    int r = n ? run(s) : 0;
    if (r < 0)
        return NULL;
    return Py_BuildValue("(nO)", n, r ? Py_True : Py_False);
}

static PyObject *Scanner_rest(Scanner *s, PyObject *unused)
{
    return PyBytes_FromStringAndSize((const char *)s->buf + s->pos, s->len - s->pos);
}

static void free_capsule(PyObject *cap)
{
    free(PyCapsule_GetPointer(cap, "_pickle_scan.column"));
}

/* A numpy array owning a malloc'ed column (shrunk to n items). */
static PyObject *column(void *data, Py_ssize_t n, int type, size_t item)
{
    npy_intp dims[1] = {n};
    void *d = realloc(data, n ? (size_t)n * item : 1);
    if (!d)
        d = data;
    PyObject *a = PyArray_SimpleNewFromData(1, dims, type, d);
    if (!a) {
        free(d);
        return NULL;
    }
    PyObject *cap = PyCapsule_New(d, "_pickle_scan.column", free_capsule);
    if (!cap || PyArray_SetBaseObject((PyArrayObject *)a, cap) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(a);
        return NULL;
    }
    return a;
}

/* After STOP: (object, columns dict, tables dict); the columns move out of the scanner. */
static PyObject *Scanner_result(Scanner *s, PyObject *unused)
{
    if (!s->done || !s->result) {
        PyErr_SetString(PyExc_ValueError, "_pickle_scan: no result (no STOP yet, or taken)");
        return NULL;
    }
    Py_ssize_t n = s->nrows;
    PyObject *cols = PyDict_New();
    if (!cols)
        return NULL;
    struct { const char *name; void **data; int type; size_t item; } spec[] = {
        {"action", (void **)&s->action, NPY_UINT8, 1},   {"layout", (void **)&s->layout, NPY_UINT8, 1},
        {"addr", (void **)&s->addr, NPY_INT64, 8},       {"size", (void **)&s->size, NPY_INT64, 8},
        {"stream", (void **)&s->stream, NPY_INT64, 8},   {"time_us", (void **)&s->time_us, NPY_INT64, 8},
        {"device_free", (void **)&s->dfree, NPY_INT64, 8}, {"frames", (void **)&s->frames, NPY_INT32, 4},
        {"compile_context", (void **)&s->cc, NPY_INT32, 4}, {"user_metadata", (void **)&s->um, NPY_INT32, 4},
    };
    for (size_t i = 0; i < sizeof(spec) / sizeof(spec[0]); i++) {
        void *d = *spec[i].data;
        if (!d && !(d = malloc(1))) {
            Py_DECREF(cols);
            return PyErr_NoMemory();
        }
        *spec[i].data = NULL;
        PyObject *a = column(d, n, spec[i].type, spec[i].item);
        if (!a || PyDict_SetItemString(cols, spec[i].name, a) < 0) {
            Py_XDECREF(a);
            Py_DECREF(cols);
            return NULL;
        }
        Py_DECREF(a);
    }
    s->nrows = s->rcap = 0;
    PyObject *layouts = PyList_New(s->nlayouts);
    if (!layouts) {
        Py_DECREF(cols);
        return NULL;
    }
    for (int i = 0; i < s->nlayouts; i++)
        PyList_SET_ITEM(layouts, i, PyLong_FromUnsignedLongLong(s->layouts[i]));
    PyObject *tables = Py_BuildValue("{sOsOsOsOsOsN}", "reps", s->reps, "compile_context", s->cc_strs,
                                     "user_metadata", s->um_strs, "key_names", s->key_names, "row_lists",
                                     s->row_lists, "layouts", layouts);
    if (!tables) {
        Py_DECREF(cols);
        return NULL;
    }
    /* The memo is no longer needed: let go of everything it holds. */
    for (Py_ssize_t i = 0; i < s->msize; i++)
        Py_CLEAR(s->memo[i]);
    /* Each list of rows must sit in one place of the tree (its record here holds the
     * other reference): found twice, or as a block list as well, the tree reader would
     * read its entries twice, or as something else. */
    Py_ssize_t it = 0;
    PyObject *k, *rec;
    while (PyDict_Next(s->row_lists, &it, &k, &rec))
        if (Py_REFCNT(PyList_GET_ITEM(rec, 0)) != 2) {
            Py_DECREF(cols);
            Py_DECREF(tables);
            unusual("a list of trace entries found in more than one place", s->base + s->pos);
            return NULL;
        }
    PyObject *out = Py_BuildValue("(NNN)", s->result, cols, tables);
    s->result = NULL;
    return out;
}

static PyObject *Scanner_offset(Scanner *s, void *unused)
{
    return PyLong_FromLongLong(s->base + s->pos);
}

static PyMethodDef Scanner_methods[] = {
    {"feed", (PyCFunction)Scanner_feed, METH_O,
     "feed(bytes) -> True once STOP is read; raises Unusual for what this reader leaves to the tree reader"},
    {"fill", (PyCFunction)Scanner_fill, METH_VARARGS,
     "fill(stream, n) -> (bytes read, True once STOP is read): feed from stream.readinto, without a copy"},
    {"rest", (PyCFunction)Scanner_rest, METH_NOARGS, "the bytes fed after STOP"},
    {"result", (PyCFunction)Scanner_result, METH_NOARGS, "(object, columns, tables), once, after STOP"},
    {NULL, NULL, 0, NULL},
};

static PyObject *Scanner_fast_rows(Scanner *s, void *unused)
{
    return PyLong_FromSsize_t(s->fast_rows);
}

static PyGetSetDef Scanner_getset[] = {
    {"fast_rows", (getter)Scanner_fast_rows, NULL, "trace entries read straight from the bytes", NULL},
    {"offset", (getter)Scanner_offset, NULL, "bytes of the pickle read so far", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "profscope.formats._pickle_scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scanner(codes): reads a snapshot pickle fed in pieces (see the module's doc)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
    .tp_getset = Scanner_getset,
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "_pickle_scan",
    "One-pass native reader of snapshot pickles (see profscope.formats.snapshot_pickle)", -1, NULL,
};

PyMODINIT_FUNC PyInit__pickle_scan(void)
{
    import_array();
    if (PyType_Ready(&ScannerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m)
        return NULL;
    Unusual = PyErr_NewException("profscope.formats._pickle_scan.Unusual", PyExc_ValueError, NULL);
    ROW = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    CONSUMED = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    if (!Unusual || !ROW || !CONSUMED)
        return NULL;
    Py_INCREF(Unusual);
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Unusual", Unusual) < 0 ||
        PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0)
        return NULL;
    return m;
}
