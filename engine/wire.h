/*
 * Control messages of the engine: their types, and bounds-checked little-
 * endian encoding and decoding. A message is a u16 type followed by its
 * fields; it travels in one tp_send() (at most TP_MSG_MAX bytes).
 *
 * Writers never overflow: a field that does not fit marks the buffer, and
 * eng_wbuf_len() then reports 0 (a programming error, logged by the caller).
 * Readers never read past the end: a missing or malformed field marks the
 * reader bad, every later read returns zeros, and the caller checks
 * eng_rbuf_ok() once after decoding everything.
 */
#ifndef STRATA_ENGINE_WIRE_H
#define STRATA_ENGINE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* X(name, value): the engine's message types. */
#define ENG_MSG_LIST(X)                                                        \
    X(HELLO, 1)       /* rank -> coordinator: who I am, where I listen */      \
    X(AGG_INFO, 2)    /* coordinator -> rank: one aggregator's addresses */    \
    X(WELCOME, 3)     /* coordinator -> rank: the roster is complete, the      \
                         local rank, whether the job spans hosts */            \
    X(LAYOUT, 4)      /* worker -> coordinator: layout header */               \
    X(TENSORS, 5)     /* tensor descriptions, a chunk of a layout */           \
    X(LAYOUT_OK, 6)   /* coordinator -> rank: layout accepted */               \
    X(BYE, 7)         /* rank -> coordinator: leaving cleanly */               \
    X(ABORT, 8)       /* coordinator -> rank: the job failed, why */           \
    X(JOIN, 9)        /* worker -> aggregator: first message on an ep */       \
    X(SLOTS, 10)      /* aggregator -> worker: its receive slots */            \
    X(PARAMS, 11)     /* worker -> aggregator: parameter buffers, a chunk */   \
    X(PARAMS_END, 12) /* worker -> aggregator: all parameter buffers sent */   \
    X(LEAVE, 13)      /* worker -> aggregator: finalizing */                   \
    X(LEFT, 14)       /* aggregator -> worker: LEAVE taken, close now */       \
    X(STEPS, 15)      /* worker -> coordinator: gssp, its own step time */     \
    X(RANK, 16)       /* coordinator -> worker: its group, the speed rank */   \
    X(FREEZE, 17)     /* coordinator -> worker: a regroup is coming */         \
    X(FROZEN, 18)     /* worker -> coordinator: first clock not pushed */      \
    X(PLAN, 19)       /* coordinator -> aggregator: moves, a chunk */          \
    X(PLAN_END, 20)   /* coordinator -> aggregator: the plan is complete */    \
    X(PLANNED, 21)    /* aggregator -> coordinator: plan installed */          \
    X(GO, 22)         /* coordinator -> worker: regrouped, push on */          \
    X(QUERY, 23)      /* worker -> coordinator: ESync state query */           \
    X(ANSWER, 24)     /* coordinator -> worker: READY or NOT_READY */          \
    X(ROUND, 25)      /* worker -> aggregator: local steps of a round */       \
    X(DROP, 26)       /* coordinator -> aggregator: worker out from clock B */ \
    X(FINAL, 27)      /* worker -> coordinator: gssp, last clock, then BYE */  \
    X(FAILED, 28)     /* rank -> coordinator: a failure seen; ABORT answers */ \
    X(DROPPED, 29)    /* coordinator -> worker: the job goes on without it */  \
    X(LR, 30)         /* worker -> aggregator: learning rate from a clock */   \
    X(REFUSED, 31)    /* coordinator -> rank: a HELLO of another job */        \
    X(BEAT, 32)       /* rank <-> coordinator: alive, and its progress */      \
    X(PUSHED, 33)     /* worker -> aggregator: a clock's writes all landed */  \
    X(DROP_ASK, 34)   /* coordinator -> aggregator: hold, a worker is lost */  \
    X(DROP_AT, 35)    /* aggregator -> coordinator: how far it got */          \
    X(PIECE, 36)      /* aggregator -> aggregator via the coordinator: a       \
                         chunk of a protected shard for a parity holder */     \
    X(PROTECTED, 37)  /* aggregator -> coordinator: its part of a clock's      \
                         protection done, or the clock missed */               \
    X(REJOIN_ASK, 38) /* coordinator -> aggregator: hold, a worker is back */  \
    X(REJOIN_AT, 39)  /* aggregator -> coordinator: the clock it reached       \
                         (its group's), whether it still takes the worker      \
                         back from before, the clock any group reached */      \
    X(REJOIN, 40)     /* coordinator -> aggregator: worker in from clock J     \
                         (J = 0: not now), live from at least a clock */       \
    X(PROTECT, 41)    /* coordinator -> aggregator: the clock agreed, and      \
                         the next one to protect */                            \
    X(REBUILD, 42)    /* coordinator -> aggregator: send your fragments of a   \
                         lost shard to its rebuilder */                        \
    X(FRAG, 43)       /* aggregator -> aggregator via the coordinator: a       \
                         chunk of a fragment of a lost shard's stripe */       \
    X(REBUILT, 44)    /* aggregator -> coordinator: a lost shard rebuilt */    \
    X(GRADS, 45)      /* worker -> aggregator: partitions it reads in place */ \
    X(CONSUMED, 46)   /* aggregator -> worker: a push read in place reduced    \
                         (when no model write says so at once) */              \
    X(RELEASE, 47)    /* worker -> aggregator: copy a push read in place,      \
                         the application waits on it */                        \
    X(TAKEOVER, 48)   /* coordinator -> rank: a lost aggregator's shard is     \
                         held by a survivor (the taker) from clock R on */     \
    X(TAKEN, 49)      /* taker -> worker: a taken shard's receive slots */     \
    X(LOST, 50)       /* worker -> coordinator: its link to an aggregator      \
                         broke; the first clock it cannot push before a        \
                         takeover */

/* HELLO's first fields: what a rank of another program or another version
 * of the protocol (e.g. without BEAT, or without the job incarnation) is
 * refused by. */
#define ENG_HELLO_MAGIC 0x53545241u /* "STRA" */
#define ENG_PROTO_VERSION 18

typedef enum eng_msg_type {
#define ENG_MSG_ENUM(name, value) ENG_MSG_##name = value,
    ENG_MSG_LIST(ENG_MSG_ENUM)
#undef ENG_MSG_ENUM
} eng_msg_type_t;

/* "HELLO", ...; "unknown" for other values. */
const char *eng_msg_name(unsigned type);

typedef struct eng_wbuf {
    unsigned char *p;
    size_t len, cap;
    bool overflow;
} eng_wbuf_t;

void eng_wbuf_init(eng_wbuf_t *w, void *buf, size_t cap, eng_msg_type_t type);
void eng_put_u8(eng_wbuf_t *w, uint8_t v);
void eng_put_u16(eng_wbuf_t *w, uint16_t v);
void eng_put_u32(eng_wbuf_t *w, uint32_t v);
void eng_put_u64(eng_wbuf_t *w, uint64_t v);
static inline void eng_put_i64(eng_wbuf_t *w, int64_t v)
{
    eng_put_u64(w, (uint64_t)v);
}
void eng_put_f64(eng_wbuf_t *w, double v);
/* A u16 length, then the bytes (no NUL). */
void eng_put_str(eng_wbuf_t *w, const char *s);
/* A u32 length, then the bytes. */
void eng_put_bytes(eng_wbuf_t *w, const void *p, uint32_t n);
/* Room left, for callers that fill a message until it is full. */
static inline size_t eng_wbuf_room(const eng_wbuf_t *w)
{
    return w->overflow ? 0 : w->cap - w->len;
}
/* Bytes written, or 0 after an overflow. */
static inline size_t eng_wbuf_len(const eng_wbuf_t *w)
{
    return w->overflow ? 0 : w->len;
}

typedef struct eng_rbuf {
    const unsigned char *p;
    size_t len, pos;
    bool bad;
} eng_rbuf_t;

/* Reads the type; a message shorter than it is bad. */
void eng_rbuf_init(eng_rbuf_t *r, const void *buf, size_t len,
                   unsigned *type_out);
uint8_t eng_get_u8(eng_rbuf_t *r);
uint16_t eng_get_u16(eng_rbuf_t *r);
uint32_t eng_get_u32(eng_rbuf_t *r);
uint64_t eng_get_u64(eng_rbuf_t *r);
static inline int64_t eng_get_i64(eng_rbuf_t *r)
{
    return (int64_t)eng_get_u64(r);
}
double eng_get_f64(eng_rbuf_t *r);
/* Copies a string into buf (cap bytes, NUL-terminated); one that does not
 * fit, or holds a NUL, makes the reader bad. */
void eng_get_str(eng_rbuf_t *r, char *buf, size_t cap);
/* eng_put_bytes' bytes, in place (valid while the message is), and their
 * length; NULL and 0 when malformed (the reader is bad then). */
const unsigned char *eng_get_bytes(eng_rbuf_t *r, uint32_t *len_out);
/* All read, nothing malformed, nothing left over. */
static inline bool eng_rbuf_ok(const eng_rbuf_t *r)
{
    return !r->bad && r->pos == r->len;
}

#endif /* STRATA_ENGINE_WIRE_H */
