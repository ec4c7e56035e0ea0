/*
 * A single-producer single-consumer ring of records in shared memory: how a
 * shm peer tells us that its write landed (WRITE_IMM) or hands us a control
 * message (MSG), in the order it posted them.
 *
 * The consumer creates the ring (a memfd it owns) and the producer maps it.
 * The producer owns head, the consumer tail; records are written before head
 * is published with release order and read after it is loaded with acquire
 * order, so no lock is taken. The producer rings the consumer's doorbell
 * (an eventfd) only when the consumer armed it before sleeping, so a busy
 * pair exchanges records without a system call.
 *
 * The producer is another process: the consumer checks every index and
 * record header it reads before trusting it.
 */
#ifndef STRATA_TRANSPORT_SHM_RING_H
#define STRATA_TRANSPORT_SHM_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <strata/strata.h>

/* The shared header, one cache line per writer. */
typedef struct tp_shm_ring_hdr {
    _Alignas(64) _Atomic uint64_t head;  /* producer: bytes published */
    _Alignas(64) _Atomic uint64_t tail;  /* consumer: bytes taken */
    _Alignas(64) _Atomic uint32_t armed; /* consumer sleeps: ring me */
    _Atomic uint32_t want_space;         /* producer waits: ring me */
} tp_shm_ring_hdr_t;

#define TP_SHM_RING_DATA 4096 /* offset of the records in the mapping */
#define TP_SHM_REC_ALIGN 16

enum tp_shm_rec_type {
    TP_SHM_REC_PAD = 1,       /* skip to the end of the ring */
    TP_SHM_REC_WRITE_IMM = 2, /* len: bytes written; imm */
    TP_SHM_REC_MSG = 3,       /* len: bytes of message following */
};

/* The header of every record. */
typedef struct tp_shm_rec {
    uint32_t type;
    uint32_t len;
    uint32_t imm;
    uint32_t zero;
} tp_shm_rec_t;

/* One end of a ring, in the process's own memory. */
typedef struct tp_shm_ring {
    tp_shm_ring_hdr_t *hdr;
    uint8_t *data;
    uint64_t cap;    /* bytes of records: a power of two */
    uint64_t pos;    /* producer: head; consumer: tail (our copy) */
    uint64_t cached; /* producer: last tail seen; consumer: last head */
} tp_shm_ring_t;

/* Size of the mapping for a ring with cap bytes of records. */
static inline uint64_t tp_shm_ring_bytes(uint64_t cap)
{
    return TP_SHM_RING_DATA + cap;
}

/* Attaches to a mapping of tp_shm_ring_bytes(cap) bytes (zeroed by the
 * creator). */
void tp_shm_ring_attach(tp_shm_ring_t *r, void *map, uint64_t cap);

/* ---- producer ---- */

/* Whether a record with len payload bytes fits now. */
bool tp_shm_ring_room(tp_shm_ring_t *r, uint32_t payload_len);
/* After no room: asks the consumer to ring our doorbell when it frees
 * space; false if space appeared meanwhile. */
bool tp_shm_ring_want_space(tp_shm_ring_t *r, uint32_t payload_len);
/* Publishes a record (room checked first); returns whether the consumer
 * armed its doorbell, which the caller then rings. */
bool tp_shm_ring_push(tp_shm_ring_t *r, uint32_t type, uint32_t len,
                      uint32_t imm, const void *payload);

/* ---- consumer ---- */

/* The next record, or NULL when the ring is empty. *payload_out points into
 * the ring until tp_shm_ring_next(). STRATA_ERR_PROTO (why_out set): the
 * producer broke the ring. */
strata_status_t tp_shm_ring_peek(tp_shm_ring_t *r, tp_shm_rec_t *rec_out,
                                 const uint8_t **payload_out, bool *got_out,
                                 const char **why_out);
/* Consumes the record peeked last. */
void tp_shm_ring_next(tp_shm_ring_t *r, const tp_shm_rec_t *rec);
/* Gives consumed space back to the producer; true if it waits for space
 * and the caller should ring its doorbell. */
bool tp_shm_ring_release(tp_shm_ring_t *r);
/* Arms the doorbell before sleeping; false if records arrived meanwhile. */
bool tp_shm_ring_arm(tp_shm_ring_t *r);
bool tp_shm_ring_empty(tp_shm_ring_t *r);

#endif /* STRATA_TRANSPORT_SHM_RING_H */
