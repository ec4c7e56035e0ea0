/*
 * Reed-Solomon protection of the aggregators' shards across aggregators
 * (agg/ec.h): where every fragment lives, the parity fragments built share
 * by share, and a lost shard rebuilt from the fragments that survive.
 *
 * Geometry. n aggregators, m parity fragments (1 <= m < n), k = n - m.
 * There are n stripes; stripe s has k data fragments, fragment i held by
 * aggregator (s + i) mod n, and m parity fragments, fragment k + j held by
 * aggregator (s + k + j) mod n: the n fragments of a stripe are on n
 * different aggregators, so any m aggregators lost leave k of every stripe.
 * Aggregator a's protected shard (its snapshot at the protected clock, zero
 * past its end) is cut into k pieces of `frag` bytes; piece i is data
 * fragment i of stripe (a - i) mod n. Each aggregator so keeps its snapshot
 * and m parity fragments: m / k of a shard on top of it.
 *
 * Every fragment carries the CRC32C of its bytes, taken when it was made; a
 * fragment whose bytes no longer match is not used.
 *
 * The aggregator's part (engine/agg_protect.c) snapshots its shard, sends
 * the pieces to the parity holders, and rebuilds a lost shard from the
 * survivors' fragments; the coordinator's (engine/coord_protect.c) names
 * the clocks, runs a rebuild and then the takeover of the rebuilt shard by
 * a survivor (engine/agg_takeover.c).
 */
#ifndef STRATA_ENGINE_PROTECT_H
#define STRATA_ENGINE_PROTECT_H

#include <stdbool.h>
#include <stdint.h>

#include <strata/strata.h>

#include "agg/ec.h"
#include "engine/config.h"

typedef struct eng_protect {
    uint32_t n, m, k;
    uint64_t frag; /* bytes of every fragment */
    agg_ec_t *ec;
} eng_protect_t;

/* The geometry for naggs aggregators whose largest shard has max_shard
 * bytes; STRATA_ERR_CONFIG (logged) unless 1 <= m < naggs. */
strata_status_t eng_protect_init(uint32_t naggs, uint32_t m, uint64_t max_shard,
                                 eng_protect_t *p);
void eng_protect_fini(eng_protect_t *p);

/* The stripe whose data fragment i is aggregator a's piece i. */
uint32_t eng_protect_data_stripe(const eng_protect_t *p, uint32_t a,
                                 uint32_t i);
/* The stripe whose parity fragment k + j aggregator a holds. */
uint32_t eng_protect_parity_stripe(const eng_protect_t *p, uint32_t a,
                                   uint32_t j);
/* The aggregator that holds fragment f (0..n-1) of stripe s. */
uint32_t eng_protect_holder(const eng_protect_t *p, uint32_t s, uint32_t f);

/* Piece i of a shard of shard_bytes, copied into out (frag bytes, zero past
 * the shard's end). */
void eng_protect_piece(const eng_protect_t *p, const void *shard,
                       uint64_t shard_bytes, uint32_t i, unsigned char *out);

/* A fragment as its holder keeps or sends it. */
typedef struct eng_frag {
    uint32_t stripe, index; /* index: 0..k-1 data, k..n-1 parity */
    int64_t clock;          /* the protected clock */
    uint32_t crc;           /* CRC32C of bytes[0..frag) when made */
    unsigned char *bytes;
} eng_frag_t;

/* A parity fragment starts at zero (bytes: frag bytes the caller owns) and
 * takes the share of each of the stripe's k data fragments (piece: that
 * fragment's frag bytes); sealed once all are in. */
void eng_protect_parity_reset(const eng_protect_t *p, eng_frag_t *f,
                              uint32_t stripe, uint32_t index, int64_t clock);
void eng_protect_parity_add(const eng_protect_t *p, eng_frag_t *f,
                            uint32_t data_index, const unsigned char *piece);
/* The share of bytes [off, off + len) of data fragment data_index (bytes:
 * those len bytes), for a piece that arrives in chunks. */
void eng_protect_parity_add_at(const eng_protect_t *p, eng_frag_t *f,
                               uint32_t data_index, uint64_t off, uint64_t len,
                               const unsigned char *bytes);
void eng_protect_seal(const eng_protect_t *p, eng_frag_t *f);

/* The aggregator that takes a lost shard over: of those alive (alive[a]),
 * the one holding the fewest shards (held[a]), then the lowest rank; -1
 * when none is. */
int eng_protect_taker(const uint32_t *held, const bool *alive, uint32_t n);

/* What a message about a lost aggregator adds (the sentence, or "") when
 * shards are protected but no clock of them was agreed yet, or when the
 * aggregators only sum (sum_only: nothing is protected), so that no one
 * takes the protection for recovery. */
const char *eng_protect_loss_note(const eng_config_t *cfg, bool sum_only);

/* Whether fragment f still matches its CRC32C; a mismatch is logged,
 * naming the fragment (stripe, index, clock, holder), as not used. */
bool eng_protect_intact(const eng_protect_t *p, const eng_frag_t *f);

/* Data fragment `want` of stripe s, from the fragments survivors hold
 * (have[0..nhave), any order): each is checked against its CRC32C, a
 * mismatch is logged naming the fragment and skipped, and k good ones of
 * the protected clock decode it into out (frag bytes). STRATA_ERR_STATE
 * (logged) when fewer than k good fragments are left. */
strata_status_t eng_protect_rebuild(const eng_protect_t *p, uint32_t s,
                                    int64_t clock, const eng_frag_t *have,
                                    uint32_t nhave, uint32_t want,
                                    unsigned char *out);

#endif /* STRATA_ENGINE_PROTECT_H */
