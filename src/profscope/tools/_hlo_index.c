/* The memory viewer's index of a module's logical buffers (tools/memory_viewer.py
 * `_buffers_py`, part of XProf's HloProtoBufferWrapper) in one pass over the serialized
 * xla.HloProto: each logical buffer's id, size, color, defining instruction and shape
 * index, and its shape (the instruction's, or the tuple element its last shape index
 * names) as one of the module's distinct shapes. Through upb that was a handful of field
 * reads and a ShapeProto serialization per buffer: memory_viewer._Module took 0.37-0.39
 * CPU s on compare_peers' module of 70,000 buffers (8 distinct shapes), 0.23 with this.
 *
 * memory_viewer.py keeps the Python twin and uses it when this module is absent, when
 * PROFSCOPE_NATIVE=0, and whenever this pass declines (returns None): a module or buffer
 * assignment given twice, a buffer's location or an instruction's shape given twice
 * (protobuf merges those: the twin reads the merged message), a buffer defined at an
 * instruction the module does not have, a negative tuple index (the twin raises XProf's
 * error for these two), a wire format it does not read. tests/test_memory_viewer_native.py
 * asserts both give identical indexes on every module of the real fixtures.
 *
 * Wire format read (xla/service/hlo.proto): HloProto { HloModuleProto hlo_module = 1;
 * BufferAssignmentProto buffer_assignment = 3; }, HloModuleProto { repeated
 * HloComputationProto computations = 3; }, HloComputationProto { repeated
 * HloInstructionProto instructions = 2; }, HloInstructionProto { ShapeProto shape = 3;
 * int64 id = 35; }, ShapeProto { repeated ShapeProto tuple_shapes = 4; },
 * BufferAssignmentProto { repeated LogicalBufferProto logical_buffers = 1; },
 * LogicalBufferProto { int64 id = 1; int64 size = 2; Location defined_at = 3; int64 color
 * = 4; }, Location { repeated int64 shape_index = 3; int64 instruction_id = 4; }; and where
 * each of BufferAssignmentProto's `repeated HeapSimulatorTrace heap_simulator_traces = 4`
 * lies, for the heap simulation to read in place (_heap_sim.c) instead of a copy
 * serialized again (0.04 CPU s for the 700,000 events of that module). A
 * scalar given twice takes its last value and an instruction id given twice the last
 * instruction's, as protobuf and the twin's dict do; a field of another wire type than
 * its own is an unknown field to protobuf, and skipped here too.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_protowire.h"  /* Buf, varint */

/* The next field: its number, wire type, and for wire type 2 its bytes; -1 on a bad one. */
static int field(Buf *b, int *num, int *wt, uint64_t *v, Buf *sub) {
    uint64_t tag, n;
    if (varint(b, &tag)) return -1;
    *num = (int)(tag >> 3);
    *wt = (int)(tag & 7);
    switch (*wt) {
    case 0: return varint(b, v);
    case 1: if (b->end - b->p < 8) return -1; b->p += 8; return 0;
    case 2:
        if (varint(b, &n) || n > (uint64_t)(b->end - b->p)) return -1;
        sub->p = b->p;
        sub->end = b->p + n;
        b->p += n;
        return 0;
    case 5: if (b->end - b->p < 4) return -1; b->p += 4; return 0;
    default: return -1;
    }
}

typedef struct {
    int64_t id;
    const uint8_t *shape;
    Py_ssize_t shape_len;
} Instr;

typedef struct {
    void *data;
    size_t n, cap, size;
} Vec;

static void *vec_push(Vec *v) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 1024;
        void *d = realloc(v->data, cap * v->size);
        if (!d) return NULL;
        v->data = d;
        v->cap = cap;
    }
    return (char *)v->data + v->size * v->n++;
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

/* 0 done, 1 declined, -1 out of memory. Instructions in module order. */
static int instructions(Buf module, Vec *out) {
    while (module.p < module.end) {
        int num, wt;
        uint64_t v;
        Buf comp;
        if (field(&module, &num, &wt, &v, &comp)) return 1;
        if (num != 3 || wt != 2) continue;
        while (comp.p < comp.end) {
            Buf ins;
            if (field(&comp, &num, &wt, &v, &ins)) return 1;
            if (num != 2 || wt != 2) continue;
            Instr rec = {0, NULL, 0};
            int shapes = 0;
            while (ins.p < ins.end) {
                Buf s;
                if (field(&ins, &num, &wt, &v, &s)) return 1;
                if (num == 35 && wt == 0) rec.id = (int64_t)v;
                else if (num == 3 && wt == 2) {
                    rec.shape = s.p;
                    rec.shape_len = s.end - s.p;
                    shapes++;
                }
            }
            if (shapes > 1) return 1;
            Instr *slot = vec_push(out);
            if (!slot) return -1;
            *slot = rec;
        }
    }
    return 0;
}

/* The tuple element `index` of a shape, or the shape itself when it has fewer. */
static int tuple_element(const uint8_t *shape, Py_ssize_t len, int64_t index, const uint8_t **p, Py_ssize_t *n) {
    Buf b = {shape, shape + len};
    int64_t k = 0;
    *p = shape;
    *n = len;
    while (b.p < b.end) {
        int num, wt;
        uint64_t v;
        Buf s;
        if (field(&b, &num, &wt, &v, &s)) return 1;
        if (num == 4 && wt == 2 && k++ == index) {
            *p = s.p;
            *n = s.end - s.p;
            return 0;
        }
    }
    return 0;
}

typedef struct {
    Vec ids, sizes, colors, iids, classes, idx_start, idx;
    Vec class_off, class_len;
    Vec trace_off, trace_len; /* each heap-simulator trace's bytes */
    int64_t *table; /* open addressing: class + 1, 0 empty */
    size_t table_cap;
} Out;

static int64_t shape_class(Out *o, const uint8_t *base, const uint8_t *p, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    if (o->class_off.n * 2 + 2 > o->table_cap) {
        size_t cap = o->table_cap ? o->table_cap * 2 : 1024;
        int64_t *t = calloc(cap, sizeof *t);
        if (!t) return -1;
        for (size_t c = 0; c < o->class_off.n; c++) {
            const uint8_t *cp = base + ((int64_t *)o->class_off.data)[c];
            int64_t cn = ((int64_t *)o->class_len.data)[c];
            uint64_t ch = 1469598103934665603ULL;
            for (int64_t i = 0; i < cn; i++) ch = (ch ^ cp[i]) * 1099511628211ULL;
            size_t j = mix(ch) & (cap - 1);
            while (t[j]) j = (j + 1) & (cap - 1);
            t[j] = (int64_t)c + 1;
        }
        free(o->table);
        o->table = t;
        o->table_cap = cap;
    }
    size_t j = mix(h) & (o->table_cap - 1);
    while (o->table[j]) {
        int64_t c = o->table[j] - 1;
        if (((int64_t *)o->class_len.data)[c] == n &&
            memcmp(base + ((int64_t *)o->class_off.data)[c], p, (size_t)n) == 0)
            return c;
        j = (j + 1) & (o->table_cap - 1);
    }
    int64_t c = (int64_t)o->class_off.n;
    int64_t *off = vec_push(&o->class_off), *len = vec_push(&o->class_len);
    if (!off || !len) return -1;
    *off = p - base;
    *len = n;
    o->table[j] = c + 1;
    return c;
}

#define PUSH(vec, value)                          \
    do {                                          \
        int64_t *slot_ = vec_push(&(vec));        \
        if (!slot_) return -1;                    \
        *slot_ = (value);                         \
    } while (0)

/* One LogicalBufferProto; 0 done, 1 declined, -1 out of memory. */
static int logical_buffer(Buf lb, Out *o, const uint8_t *base, const Instr *instrs, const int64_t *by_id,
                          size_t by_id_cap) {
    int64_t id = 0, size = 0, color = 0, iid = 0;
    int locations = 0;
    size_t first = o->idx.n;
    while (lb.p < lb.end) {
        int num, wt;
        uint64_t v;
        Buf loc;
        if (field(&lb, &num, &wt, &v, &loc)) return 1;
        if (num == 1 && wt == 0) id = (int64_t)v;
        else if (num == 2 && wt == 0) size = (int64_t)v;
        else if (num == 4 && wt == 0) color = (int64_t)v;
        else if (num == 3 && wt == 2) {
            if (++locations > 1) return 1;
            while (loc.p < loc.end) {
                Buf packed;
                if (field(&loc, &num, &wt, &v, &packed)) return 1;
                if (num == 4 && wt == 0) iid = (int64_t)v;
                else if (num == 3 && wt == 0) PUSH(o->idx, (int64_t)v);
                else if (num == 3 && wt == 2) {
                    while (packed.p < packed.end) {
                        if (varint(&packed, &v)) return 1;
                        PUSH(o->idx, (int64_t)v);
                    }
                }
            }
        }
    }
    size_t j = mix((uint64_t)iid) & (by_id_cap - 1);
    while (by_id[j] && instrs[by_id[j] - 1].id != iid) j = (j + 1) & (by_id_cap - 1);
    if (!by_id[j]) return 1; /* no such instruction: the twin raises XProf's error */
    const Instr *ins = &instrs[by_id[j] - 1];
    const uint8_t *shape = ins->shape ? ins->shape : base;
    Py_ssize_t n = ins->shape ? ins->shape_len : 0;
    if (o->idx.n > first) {
        int64_t last = ((int64_t *)o->idx.data)[o->idx.n - 1];
        if (last < 0) return 1; /* the twin's error */
        if (tuple_element(shape, n, last, &shape, &n)) return 1;
    }
    int64_t c = shape_class(o, base, shape, n);
    if (c < 0) return -1;
    PUSH(o->ids, id);
    PUSH(o->sizes, size);
    PUSH(o->colors, color);
    PUSH(o->iids, iid);
    PUSH(o->classes, c);
    PUSH(o->idx_start, (int64_t)o->idx.n);
    return 0;
}

/* 0 done, 1 declined, -1 out of memory. */
static int index_all(Buf wire, Out *o, Vec *instrs, int64_t **by_id_out, size_t *cap_out) {
    Buf module = {NULL, NULL}, ba = {NULL, NULL};
    int modules = 0, bas = 0;
    Buf b = wire;
    while (b.p < b.end) {
        int num, wt;
        uint64_t v;
        Buf s;
        if (field(&b, &num, &wt, &v, &s)) return 1;
        if (num == 1 && wt == 2) module = s, modules++;
        else if (num == 3 && wt == 2) ba = s, bas++;
    }
    if (modules != 1 || bas != 1) return 1;
    int r = instructions(module, instrs);
    if (r) return r;
    size_t cap = 1024;
    while (cap < instrs->n * 2 + 2) cap *= 2;
    int64_t *by_id = calloc(cap, sizeof *by_id);
    if (!by_id) return -1;
    *by_id_out = by_id;
    *cap_out = cap;
    const Instr *ins = instrs->data;
    for (size_t i = 0; i < instrs->n; i++) { /* the last instruction of an id wins */
        size_t j = mix((uint64_t)ins[i].id) & (cap - 1);
        while (by_id[j] && ins[by_id[j] - 1].id != ins[i].id) j = (j + 1) & (cap - 1);
        by_id[j] = (int64_t)i + 1;
    }
    PUSH(o->idx_start, 0);
    while (ba.p < ba.end) {
        int num, wt;
        uint64_t v;
        Buf lb;
        if (field(&ba, &num, &wt, &v, &lb)) return 1;
        if (num == 4 && wt == 2) {
            PUSH(o->trace_off, lb.p - wire.p);
            PUSH(o->trace_len, lb.end - lb.p);
            continue;
        }
        if (num != 1 || wt != 2) continue;
        r = logical_buffer(lb, o, wire.p, ins, by_id, cap);
        if (r) return r;
    }
    return 0;
}

static PyObject *as_bytes(Vec *v) {
    return PyBytes_FromStringAndSize(v->data ? v->data : "", (Py_ssize_t)(v->n * sizeof(int64_t)));
}

static PyObject *index_buffers(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer wb;
    if (!PyArg_ParseTuple(args, "y*", &wb)) return NULL;
    Out o;
    memset(&o, 0, sizeof o);
    Vec *all[] = {&o.ids,       &o.sizes,     &o.colors,    &o.iids,      &o.classes,  &o.idx_start,
                  &o.idx,       &o.class_off, &o.class_len, &o.trace_off, &o.trace_len};
    const int n_all = (int)(sizeof all / sizeof *all);
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) all[i]->size = sizeof(int64_t);
    Vec instrs = {NULL, 0, 0, sizeof(Instr)};
    int64_t *by_id = NULL;
    size_t cap = 0;
    Buf wire = {wb.buf, (const uint8_t *)wb.buf + wb.len};
    PyObject *ret = NULL;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = index_all(wire, &o, &instrs, &by_id, &cap);
    Py_END_ALLOW_THREADS
    if (r < 0) {
        PyErr_NoMemory();
    } else if (r > 0) {
        ret = Py_None;
        Py_INCREF(ret);
    } else {
        ret = PyTuple_New(n_all);
        for (int i = 0; ret && i < n_all; i++) {
            PyObject *b = as_bytes(all[i]);
            if (!b) {
                Py_CLEAR(ret);
                break;
            }
            PyTuple_SET_ITEM(ret, i, b);
        }
    }
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
    free(o.table);
    free(instrs.data);
    free(by_id);
    PyBuffer_Release(&wb);
    return ret;
}

static PyMethodDef methods[] = {
    {"index_buffers", index_buffers, METH_VARARGS,
     "A module's logical buffers and their distinct shapes (memory_viewer._buffers_py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hlo_index", NULL, -1, methods};

PyMODINIT_FUNC PyInit__hlo_index(void) { return PyModule_Create(&module); }
