/* Encoding and decoding of the engine's control messages. */
#include "engine/wire.h"

#include <string.h>

const char *eng_msg_name(unsigned type)
{
    switch (type) {
#define ENG_MSG_CASE(name, value)                                              \
    case value:                                                                \
        return #name;
        ENG_MSG_LIST(ENG_MSG_CASE)
#undef ENG_MSG_CASE
    }
    return "unknown";
}

static void eng_put(eng_wbuf_t *w, uint64_t v, size_t n)
{
    if (w->overflow || w->cap - w->len < n) {
        w->overflow = true;
        return;
    }
    for (size_t i = 0; i < n; i++)
        w->p[w->len++] = (unsigned char)(v >> (8 * i));
}

void eng_wbuf_init(eng_wbuf_t *w, void *buf, size_t cap, eng_msg_type_t type)
{
    *w = (eng_wbuf_t){.p = buf, .cap = cap};
    eng_put_u16(w, (uint16_t)type);
}

void eng_put_u8(eng_wbuf_t *w, uint8_t v)
{
    eng_put(w, v, 1);
}

void eng_put_u16(eng_wbuf_t *w, uint16_t v)
{
    eng_put(w, v, 2);
}

void eng_put_u32(eng_wbuf_t *w, uint32_t v)
{
    eng_put(w, v, 4);
}

void eng_put_u64(eng_wbuf_t *w, uint64_t v)
{
    eng_put(w, v, 8);
}

void eng_put_f64(eng_wbuf_t *w, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    eng_put(w, bits, 8);
}

void eng_put_str(eng_wbuf_t *w, const char *s)
{
    size_t n = strlen(s);
    if (n > UINT16_MAX || w->overflow || w->cap - w->len < 2 + n) {
        w->overflow = true;
        return;
    }
    eng_put_u16(w, (uint16_t)n);
    memcpy(w->p + w->len, s, n);
    w->len += n;
}

void eng_put_bytes(eng_wbuf_t *w, const void *p, uint32_t n)
{
    if (w->overflow || w->cap - w->len < 4 + (size_t)n) {
        w->overflow = true;
        return;
    }
    eng_put_u32(w, n);
    memcpy(w->p + w->len, p, n);
    w->len += n;
}

static uint64_t eng_get(eng_rbuf_t *r, size_t n)
{
    if (r->bad || r->len - r->pos < n) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)r->p[r->pos++] << (8 * i);
    return v;
}

void eng_rbuf_init(eng_rbuf_t *r, const void *buf, size_t len,
                   unsigned *type_out)
{
    *r = (eng_rbuf_t){.p = buf, .len = len};
    *type_out = eng_get_u16(r);
}

uint8_t eng_get_u8(eng_rbuf_t *r)
{
    return (uint8_t)eng_get(r, 1);
}

uint16_t eng_get_u16(eng_rbuf_t *r)
{
    return (uint16_t)eng_get(r, 2);
}

uint32_t eng_get_u32(eng_rbuf_t *r)
{
    return (uint32_t)eng_get(r, 4);
}

uint64_t eng_get_u64(eng_rbuf_t *r)
{
    return eng_get(r, 8);
}

double eng_get_f64(eng_rbuf_t *r)
{
    uint64_t bits = eng_get(r, 8);
    double v;
    memcpy(&v, &bits, sizeof(v));
    return v;
}

void eng_get_str(eng_rbuf_t *r, char *buf, size_t cap)
{
    size_t n = eng_get_u16(r);
    if (r->bad || r->len - r->pos < n || n >= cap ||
        memchr(r->p + r->pos, '\0', n)) {
        r->bad = true;
        if (cap)
            buf[0] = '\0';
        return;
    }
    memcpy(buf, r->p + r->pos, n);
    buf[n] = '\0';
    r->pos += n;
}

const unsigned char *eng_get_bytes(eng_rbuf_t *r, uint32_t *len_out)
{
    uint32_t n = eng_get_u32(r);
    *len_out = 0;
    if (r->bad || r->len - r->pos < n) {
        r->bad = true;
        return NULL;
    }
    const unsigned char *p = r->p + r->pos;
    r->pos += n;
    *len_out = n;
    return p;
}
