/*
 * The aggregator's part of shard protection (engine/protect.h has the code
 * and its geometry; docs/engine.md says what is covered).
 *
 * Every STRATA_PROTECT_EVERY clocks, right after the update that brings a
 * partition's slowest group to the protected clock c, the partition (model,
 * momentum, an fp16 or bf16 model's fp32 master) is copied into a snapshot
 * of the shard, as a checkpoint is (agg_ckpt.c). Once every partition is
 * in, each of the snapshot's k pieces goes to the m holders of its
 * stripe's parity, in chunks of one control message, relayed by the
 * coordinator (aggregators have no connections between them). Chunks go
 * out only while this rank's control backlog is empty, so that the data
 * path's own messages never queue behind them; a protected clock that
 * comes while the previous snapshot is still going out is skipped.
 *
 * A holder adds each chunk's share to the parity fragment it is building
 * for c (ec_encode_data_update) and seals it with its CRC32C once every
 * non-zero piece of the stripe is in (a piece past the end of its shard is
 * zero and adds nothing, so it is not sent). A newer clock's chunk
 * abandons an incomplete fragment. A sealed fragment is checked against
 * its CRC32C when a newer one replaces it and when the aggregator
 * finishes: one that fails is named in a warning and dropped.
 */
#include <inttypes.h>
#include <string.h>

#include "engine/aggregator.h"
#include "engine/protect.h"
#include "util/alloc.h"
#include "util/log.h"

/* Shard bytes in one PIECE: a multiple of 64 (ISA-L's blocks) that fits
 * TP_MSG_MAX with the header (type and 9 fields, 50 bytes). */
#define ENG_PROTECT_CHUNK 3968
_Static_assert(ENG_PROTECT_CHUNK + 50 <= TP_MSG_MAX,
               "a PIECE fits one control message");

/* A parity fragment this aggregator holds. */
typedef struct eng_held {
    eng_frag_t sealed;   /* clock -1: none (or dropped) */
    eng_frag_t building; /* clock -1: none */
    uint64_t in, want;   /* bytes of shares added, and of the stripe's */
} eng_held_t;

struct eng_agg_protect {
    eng_protect_t geo;
    int64_t every, next; /* clocks */
    unsigned char *snap; /* k * frag: the shard at snap_clock, zero past it */
    uint64_t payload;    /* this shard's bytes in the snapshot */
    uint32_t ncopied;    /* partitions copied for `next` */
    int64_t snap_clock;
    uint64_t cursor, total; /* chunks of the snapshot sent, and to send */
    uint64_t skipped;
    eng_held_t *held; /* [m] */
    int64_t reported; /* the last clock said PROTECTED of, 0: none */
    int64_t flip_at;  /* STRATA_PROTECT_FLIP, 0: never */
    bool sealed_once;
};

/* The bytes shard s keeps in a snapshot: its model, then the momentum and
 * fp32 master of each of its partitions that has them. */
static uint64_t eng_protect_payload(const eng_agg_t *a, uint32_t s)
{
    const eng_layout_t *lay = a->layout;
    bool sgd = a->upd.ops->needs_momentum;
    uint64_t bytes = lay->shard_bytes[s];
    for (uint32_t i = 0; i < lay->shard_nparts[s]; i++) {
        const eng_partition_t *part = &lay->parts[lay->shard_parts[s][i]];
        uint64_t n = part->count * sizeof(float);
        bytes += sgd && a->upd.momentum != 0 ? n : 0;
        bytes += sgd && strata_dtype_size(part->dtype) == 2 ? n : 0;
    }
    return bytes;
}

/* Pieces of a shard of `payload` bytes that are not all zero. */
static uint32_t eng_protect_npieces(const eng_protect_t *p, uint64_t payload)
{
    return (uint32_t)((payload + p->frag - 1) / p->frag);
}

static strata_status_t eng_protect_held_init(eng_agg_t *a,
                                             struct eng_agg_protect *pr)
{
    const eng_protect_t *p = &pr->geo;
    pr->held = util_calloc(p->m, sizeof(*pr->held));
    if (!pr->held)
        return STRATA_ERR_NOMEM;
    for (uint32_t j = 0; j < p->m; j++) {
        eng_held_t *h = &pr->held[j];
        uint32_t s = eng_protect_parity_stripe(p, a->shard, j);
        h->sealed = (eng_frag_t){.stripe = s, .index = p->k + j, .clock = -1};
        h->building = h->sealed;
        h->sealed.bytes = util_aligned_alloc(64, p->frag);
        h->building.bytes = util_aligned_alloc(64, p->frag);
        if (!h->sealed.bytes || !h->building.bytes)
            return STRATA_ERR_NOMEM;
        for (uint32_t i = 0; i < p->k; i++) {
            uint32_t holder = eng_protect_holder(p, s, i);
            h->want +=
                i < eng_protect_npieces(p, eng_protect_payload(a, holder))
                    ? p->frag
                    : 0;
        }
    }
    return STRATA_OK;
}

strata_status_t eng_agg_protect_setup(strata_ctx_t *ctx)
{
    eng_agg_t *a = ctx->agg;
    int64_t every = eng_config_int(ctx->cfg, ENG_CFG_PROTECT_EVERY);
    uint32_t m = (uint32_t)eng_config_int(ctx->cfg, ENG_CFG_PROTECT_PARITY);
    if (every == 0)
        return STRATA_OK;
    if (ctx->policy->sum_only) {
        util_info("STRATA_PROTECT_EVERY: the aggregators only sum, they keep "
                  "no model to protect");
        return STRATA_OK;
    }
    if (m >= (uint32_t)ctx->naggs) {
        util_error("STRATA_PROTECT_EVERY=%" PRId64
                   " with STRATA_PROTECT_PARITY=%u needs more than %u "
                   "aggregators (the job has %d)",
                   every, m, m, ctx->naggs);
        return STRATA_ERR_CONFIG;
    }
    struct eng_agg_protect *pr = util_calloc(1, sizeof(*pr));
    if (!pr)
        return STRATA_ERR_NOMEM;
    a->prot = pr;
    pr->every = pr->next = every;
    pr->snap_clock = -1;
    pr->flip_at = eng_config_int(ctx->cfg, ENG_CFG_PROTECT_FLIP);
    uint64_t largest = 0;
    for (uint32_t s = 0; s < (uint32_t)ctx->naggs; s++) {
        uint64_t b = eng_protect_payload(a, s);
        largest = b > largest ? b : largest;
    }
    strata_status_t st =
        eng_protect_init((uint32_t)ctx->naggs, m, largest, &pr->geo);
    if (st != STRATA_OK)
        return st;
    const eng_protect_t *p = &pr->geo;
    pr->payload = eng_protect_payload(a, a->shard);
    pr->snap = util_aligned_alloc(64, (size_t)p->k * p->frag);
    if (!pr->snap)
        return STRATA_ERR_NOMEM;
    memset(pr->snap, 0, (size_t)p->k * p->frag);
    uint64_t off = a->layout->shard_bytes[a->shard];
    for (uint32_t i = 0; i < a->nparts; i++) {
        eng_apart_t *ap = &a->parts[i];
        uint64_t n = ap->part->count * sizeof(float);
        ap->prot_off = off;
        ap->prot_at = -1;
        off += (ap->momentum ? n : 0) + (ap->master ? n : 0);
    }
    st = eng_protect_held_init(a, pr);
    if (st != STRATA_OK)
        return st;
    util_info("shard %u: protected every %" PRId64 " clocks by %u parity "
              "fragments across %d aggregators (%" PRIu64 " bytes each)",
              a->shard, every, m, ctx->naggs, p->frag);
    return STRATA_OK;
}

static void eng_protect_skip(eng_agg_t *a, int64_t clock, const char *why)
{
    struct eng_agg_protect *pr = a->prot;
    if (pr->skipped++ == 0)
        util_warn("shard %u: protection of clock %" PRId64
                  " skipped: %s (further skips are logged at debug level)",
                  a->shard, pr->next, why);
    else
        util_debug("shard %u: protection of clock %" PRId64 " skipped: %s",
                   a->shard, pr->next, why);
    pr->next = (clock / pr->every + 1) * pr->every;
    pr->ncopied = 0;
}

static void eng_protect_copy(eng_agg_t *a, const eng_apart_t *ap)
{
    unsigned char *snap = a->prot->snap;
    size_t n = ap->part->count * sizeof(float);
    uint64_t off = ap->prot_off;
    memcpy(snap + ap->part->shard_off, (char *)a->out + ap->part->shard_off,
           ap->part->bytes);
    if (ap->momentum) {
        memcpy(snap + off, ap->momentum, n);
        off += n;
    }
    if (ap->master)
        memcpy(snap + off, ap->master, n);
}

void eng_agg_protect_note(strata_ctx_t *ctx, uint32_t i)
{
    eng_agg_t *a = ctx->agg;
    struct eng_agg_protect *pr = a->prot;
    eng_apart_t *ap = &a->parts[i];
    if (!pr)
        return;
    int64_t c = eng_tracker_min_clock(ap->tracker);
    if (c < pr->next || c == ENG_TRACKER_INF || ap->prot_at == pr->next)
        return;
    if (c > pr->next) {
        eng_protect_skip(a, c, "a partition moved past it first");
        return;
    }
    if (pr->cursor < pr->total) {
        eng_protect_skip(a, c, "the previous snapshot is still going out");
        return;
    }
    eng_protect_copy(a, ap);
    ap->prot_at = pr->next;
    if (++pr->ncopied < a->nparts)
        return;
    const eng_protect_t *p = &pr->geo;
    uint64_t chunks = (p->frag + ENG_PROTECT_CHUNK - 1) / ENG_PROTECT_CHUNK;
    pr->snap_clock = pr->next;
    pr->cursor = 0;
    pr->total = eng_protect_npieces(p, pr->payload) * p->m * chunks;
    pr->next += pr->every;
    pr->ncopied = 0;
    eng_agg_protect_flush(ctx);
}

/* Says PROTECTED of `clock` to the coordinator once this aggregator's part
 * of it is done: its pieces of the clock all sent (an aggregator without
 * partitions has none) and every parity fragment it holds that is not all
 * zero sealed at that clock. */
static void eng_protect_report(strata_ctx_t *ctx, int64_t clock)
{
    eng_agg_t *a = ctx->agg;
    struct eng_agg_protect *pr = a->prot;
    if (clock <= pr->reported ||
        (a->nparts && (pr->snap_clock != clock || pr->cursor < pr->total)))
        return;
    for (uint32_t j = 0; j < pr->geo.m; j++)
        if (pr->held[j].want && pr->held[j].sealed.clock != clock)
            return;
    pr->reported = clock;
    unsigned char buf[16];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_PROTECTED);
    eng_put_i64(&w, clock);
    strata_status_t st = eng_send(&ctx->coord_peer, &w, NULL);
    if (st != STRATA_OK) /* the coordinator is gone: its disconnect says */
        util_debug("cannot say PROTECTED of clock %" PRId64 ": %s", clock,
                   strata_strerror(st));
}

void eng_agg_protect_flush(strata_ctx_t *ctx)
{
    eng_agg_t *a = ctx->agg;
    struct eng_agg_protect *pr = a->prot;
    if (!pr)
        return;
    const eng_protect_t *p = &pr->geo;
    uint64_t chunks = (p->frag + ENG_PROTECT_CHUNK - 1) / ENG_PROTECT_CHUNK;
    while (pr->cursor < pr->total && !ctx->msgs.head) {
        uint32_t i = (uint32_t)(pr->cursor / (p->m * chunks));
        uint32_t j = (uint32_t)(pr->cursor / chunks % p->m);
        uint64_t off = pr->cursor % chunks * ENG_PROTECT_CHUNK;
        uint64_t len = p->frag - off < ENG_PROTECT_CHUNK ? p->frag - off
                                                         : ENG_PROTECT_CHUNK;
        uint32_t s = eng_protect_data_stripe(p, a->shard, i);
        unsigned char buf[TP_MSG_MAX];
        eng_wbuf_t w;
        eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_PIECE);
        eng_put_u32(&w, eng_protect_holder(p, s, p->k + j));
        eng_put_u32(&w, p->m);
        eng_put_u64(&w, p->frag);
        eng_put_u32(&w, s);
        eng_put_u32(&w, i);
        eng_put_u32(&w, j);
        eng_put_i64(&w, pr->snap_clock);
        eng_put_u64(&w, off);
        eng_put_bytes(&w, pr->snap + (uint64_t)i * p->frag + off,
                      (uint32_t)len);
        strata_status_t st = eng_send(&ctx->coord_peer, &w, NULL);
        if (st != STRATA_OK) {
            /* The coordinator is gone: its disconnect fails the job. */
            util_debug("shard %u: protection of clock %" PRId64 " stopped: %s",
                       a->shard, pr->snap_clock, strata_strerror(st));
            pr->cursor = pr->total;
            return;
        }
        if (++pr->cursor == pr->total) {
            util_debug("shard %u: the pieces of clock %" PRId64 " all sent",
                       a->shard, pr->snap_clock);
            eng_protect_report(ctx, pr->snap_clock);
        }
    }
}

/* Every share of the fragment is in: it replaces the sealed one, which is
 * checked first (a fragment corrupted while held is named). */
static void eng_protect_held_seal(strata_ctx_t *ctx, eng_held_t *h)
{
    eng_agg_t *a = ctx->agg;
    struct eng_agg_protect *pr = a->prot;
    const eng_protect_t *p = &pr->geo;
    if (h->sealed.clock >= 0)
        eng_protect_intact(p, &h->sealed);
    unsigned char *old = h->sealed.bytes;
    h->sealed = h->building;
    h->building.bytes = old;
    h->in = 0;
    eng_protect_seal(p, &h->sealed);
    if (!pr->sealed_once)
        util_info("shard %u: holds parity fragment %u of stripe %u, first "
                  "sealed at clock %" PRId64,
                  a->shard, h->sealed.index, h->sealed.stripe, h->sealed.clock);
    else
        util_debug("shard %u: parity fragment %u of stripe %u sealed at "
                   "clock %" PRId64,
                   a->shard, h->sealed.index, h->sealed.stripe,
                   h->sealed.clock);
    pr->sealed_once = true;
    if (pr->flip_at && h->sealed.clock >= pr->flip_at) {
        h->sealed.bytes[p->frag / 2] ^= 0x10;
        pr->flip_at = 0;
        util_info("STRATA_PROTECT_FLIP: a bit of parity fragment %u of "
                  "stripe %u (clock %" PRId64 ") flipped",
                  h->sealed.index, h->sealed.stripe, h->sealed.clock);
    }
    eng_protect_report(ctx, h->sealed.clock);
}

strata_status_t eng_agg_protect_piece(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    struct eng_agg_protect *pr = a->prot;
    uint32_t dst = eng_get_u32(r), m = eng_get_u32(r);
    uint64_t frag = eng_get_u64(r);
    uint32_t s = eng_get_u32(r), i = eng_get_u32(r), j = eng_get_u32(r);
    int64_t clock = eng_get_i64(r);
    uint64_t off = eng_get_u64(r);
    uint32_t len;
    const unsigned char *bytes = eng_get_bytes(r, &len);
    if (!eng_rbuf_ok(r))
        return STRATA_ERR_PROTO;
    if (!pr || pr->geo.m != m || pr->geo.frag != frag) {
        util_error("shard %u: a protection piece of %u parity fragments of "
                   "%" PRIu64 " bytes came, but here %u of %" PRIu64
                   ": STRATA_PROTECT_EVERY and STRATA_PROTECT_PARITY must be "
                   "the same on every aggregator",
                   a->shard, m, frag, pr ? pr->geo.m : 0,
                   pr ? pr->geo.frag : 0);
        return STRATA_ERR_CONFIG;
    }
    const eng_protect_t *p = &pr->geo;
    if (dst != a->shard || i >= p->k || j >= p->m ||
        eng_protect_parity_stripe(p, a->shard, j) != s || clock < 1 ||
        off > frag || len > frag - off || len % 64) {
        util_error("shard %u: a protection piece that does not fit here "
                   "(for aggregator %u, stripe %u, piece %u, parity %u, "
                   "bytes %" PRIu64 "+%u of %" PRIu64 ")",
                   a->shard, dst, s, i, j, off, len, frag);
        return STRATA_ERR_PROTO;
    }
    eng_held_t *h = &pr->held[j];
    if (clock <= h->sealed.clock || clock < h->building.clock)
        return STRATA_OK; /* a newer protection is under way */
    if (clock > h->building.clock) {
        if (h->in)
            util_debug("shard %u: parity fragment %u of stripe %u of clock "
                       "%" PRId64 " abandoned for clock %" PRId64,
                       a->shard, p->k + j, s, h->building.clock, clock);
        eng_protect_parity_reset(p, &h->building, s, p->k + j, clock);
        h->in = 0;
    }
    eng_protect_parity_add_at(p, &h->building, i, off, len, bytes);
    h->in += len;
    if (h->in == h->want)
        eng_protect_held_seal(ctx, h);
    return STRATA_OK;
}

void eng_agg_protect_free(eng_agg_t *a)
{
    struct eng_agg_protect *pr = a->prot;
    if (!pr)
        return;
    for (uint32_t j = 0; pr->held && j < pr->geo.m; j++) {
        eng_held_t *h = &pr->held[j];
        if (h->sealed.clock >= 0 && h->sealed.bytes)
            eng_protect_intact(&pr->geo, &h->sealed);
        util_free(h->sealed.bytes);
        util_free(h->building.bytes);
    }
    util_free(pr->held);
    util_free(pr->snap);
    eng_protect_fini(&pr->geo);
    util_free(pr);
    a->prot = NULL;
}
