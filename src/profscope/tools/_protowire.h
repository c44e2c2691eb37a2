/* The protobuf wire format's reading step shared by the tools' C passes (_heap_sim.c,
 * _hlo_index.c): a bounded cursor over serialized bytes and its varint (encoding.md,
 * "Base 128 Varints": 7 bits a byte, least significant group first, the top bit set on
 * every byte but the last; at most 10 bytes for 64 bits). Each pass reads only what it
 * was given: nothing here reads past `end`. */
#ifndef PROFSCOPE_PROTOWIRE_H
#define PROFSCOPE_PROTOWIRE_H

#include <stdint.h>

typedef struct {
    const uint8_t *p, *end;
} Buf;

/* A varint, or -1 when it runs past the end or over 10 bytes. */
static inline int varint(Buf *b, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (b->p >= b->end) return -1;
        uint8_t c = *b->p++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

#endif
