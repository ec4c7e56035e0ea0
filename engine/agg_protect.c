/*
 * The aggregator's part of shard protection (engine/protect.h has the code
 * and its geometry; docs/engine.md says what is covered).
 *
 * At the clock c the coordinator names (STRATA_PROTECT_EVERY first, then
 * one after each agreement: coord_protect.c), right after the update that
 * brings a partition's slowest group to c or past it, the partition (model,
 * momentum, an fp16 or bf16 model's fp32 master) is copied into a snapshot
 * of the shard, as a checkpoint is (agg_ckpt.c). A partition's least clock
 * may jump past c (a regroup moves its slowest workers into a group further
 * on, a dropped worker leaves the minimum, or the naming came late): it is
 * copied where it is, which holds every update below c and some beyond, so
 * no aggregator has to stop at c and none misses it. That is safe for a
 * takeover: its resume clocks are past every push a worker made
 * (coord_protect.c). Once every partition is in, each of the snapshot's k
 * pieces goes to the m holders of its stripe's parity, in chunks of one
 * control message, relayed by the coordinator (aggregators have no
 * connections between them). Chunks go out only while this rank's control
 * backlog is empty, so that the data path's own messages never queue
 * behind them.
 *
 * A holder adds each chunk's share to the parity fragment it is building
 * for c (ec_encode_data_update) and seals it with its CRC32C once every
 * non-zero piece of the stripe is in (a piece past the end of its shard is
 * zero and adds nothing, so it is not sent). A newer clock's chunk
 * abandons an incomplete fragment. A sealed fragment is checked against
 * its CRC32C when a newer one replaces it and when the aggregator
 * finishes: one that fails is named in a warning and dropped.
 *
 * The snapshot and the parity of the agreed clock are kept until the next
 * one is agreed (PROTECT). When an aggregator is lost, every survivor
 * sends its fragment of each of the lost shard's stripes at the agreed
 * clock to the rebuilder (REBUILD, FRAG), which decodes the shard and
 * checks it against the CRC32C its owner said of it (REBUILT).
 *
 * Places. The geometry's n places are the shards (protect.h), each held
 * by one aggregator: its own at first. A spare that takes a shard over
 * holds that shard's place from then on (its pieces from its snapshot of
 * the shard, its parity fragments) beside its own, whose data is zero: the
 * stripes stay the same, and protection goes on from the next clock named
 * (eng_agg_protect_moved). Any other takeover ends protection.
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

/* Messages a fragment goes in, and the bytes of the one at `off`. */
static uint64_t eng_protect_chunks(const eng_protect_t *p)
{
    return (p->frag + ENG_PROTECT_CHUNK - 1) / ENG_PROTECT_CHUNK;
}

static uint64_t eng_protect_chunk_len(const eng_protect_t *p, uint64_t off)
{
    return p->frag - off < ENG_PROTECT_CHUNK ? p->frag - off
                                             : ENG_PROTECT_CHUNK;
}

/* A parity fragment this aggregator holds. */
typedef struct eng_held {
    eng_frag_t agreed;   /* of the agreed clock; clock -1: none */
    eng_frag_t sealed;   /* clock -1: none (or dropped) */
    eng_frag_t building; /* clock -1: none */
    uint64_t in, want;   /* bytes of shares added, and of the stripe's */
} eng_held_t;

/* A lost shard being rebuilt here: every other aggregator's fragment of
 * each of its k stripes (have[i * (n - 1) + h]) and the bytes of each in
 * (got). Those of aggregators lost too are not awaited (pr->gone). */
typedef struct eng_rebuild {
    uint32_t lost;
    int64_t clock;
    uint32_t crc; /* what the lost aggregator said of its snapshot */
    eng_frag_t *have;
    uint64_t *got;
    unsigned char *shard; /* k * frag: the rebuilt shard */
    bool decoded;
    bool intact; /* decoded, and its CRC32C matches */
} eng_rebuild_t;

/* This aggregator's fragments of a lost shard's stripes, being sent to its
 * rebuilder (to), chunk by chunk. */
typedef struct eng_send_frags {
    int64_t clock; /* -1: nothing to send */
    uint32_t to;
    uint64_t cursor, total;
} eng_send_frags_t;

struct eng_agg_protect {
    eng_protect_t geo;
    int64_t every, next; /* clocks; next: the one named, 0: none */
    unsigned char *snap; /* k * frag: the shard at snap_clock, zero past it */
    unsigned char *kept; /* ... at the agreed clock kept_clock */
    uint64_t payload;    /* this shard's bytes in the snapshot */
    uint32_t ncopied;    /* partitions copied for `next` */
    int64_t snap_clock, kept_clock;
    uint32_t snap_crc;      /* of the snapshot's payload */
    uint64_t cursor, total; /* chunks of the snapshot sent, and to send */
    eng_held_t *held;       /* [nheld]: m per place held here */
    uint32_t nheld;
    int64_t reported; /* the last clock said PROTECTED of, 0: none */
    int64_t flip_at;  /* STRATA_PROTECT_FLIP, 0: never */
    bool sealed_once;
    /* Per aggregator rank: this one's fragments of its shard to send to
     * its rebuilder. Per place: whether its holder is lost (named by a
     * REBUILD), and who holds it (an aggregator rank). */
    eng_send_frags_t *out;
    bool *gone;
    uint32_t *holder;
    uint32_t place;              /* the place whose shard is snapshot here */
    uint32_t places[2], nplaces; /* the places held here */
    unsigned char *zero;         /* frag zero bytes: a spare's own data */
    bool over;                   /* protection ended by a takeover */
    eng_rebuild_t *rb;           /* the rebuild done here, if any */
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

/* The m parity fragments of `place`, held here from now on (pr->held has
 * room for two places: a spare's own and the one it takes over). */
static strata_status_t
eng_protect_held_add(eng_agg_t *a, struct eng_agg_protect *pr, uint32_t place)
{
    const eng_protect_t *p = &pr->geo;
    pr->places[pr->nplaces++] = place;
    for (uint32_t j = 0; j < p->m; j++) {
        eng_held_t *h = &pr->held[pr->nheld++];
        uint32_t s = eng_protect_parity_stripe(p, place, j);
        h->sealed = (eng_frag_t){.stripe = s, .index = p->k + j, .clock = -1};
        h->agreed = h->building = h->sealed;
        h->agreed.bytes = util_aligned_alloc(64, p->frag);
        h->sealed.bytes = util_aligned_alloc(64, p->frag);
        h->building.bytes = util_aligned_alloc(64, p->frag);
        if (!h->agreed.bytes || !h->sealed.bytes || !h->building.bytes)
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

static void eng_protect_report(strata_ctx_t *ctx, int64_t clock);

/* Where each partition's momentum and master go in a snapshot of shard s
 * (after its model, in the order of its partitions: eng_protect_payload),
 * every partition held here being of shard s. */
static void eng_protect_offsets(eng_agg_t *a, uint32_t s)
{
    uint64_t off = a->layout->shard_bytes[s];
    for (uint32_t i = 0; i < a->nparts; i++) {
        eng_apart_t *ap = &a->parts[i];
        uint64_t n = ap->part->count * sizeof(float);
        ap->prot_off = off;
        ap->prot_at = -1;
        off += (ap->momentum ? n : 0) + (ap->master ? n : 0);
    }
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
    pr->snap_clock = pr->kept_clock = -1;
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
    pr->out = util_calloc(p->n, sizeof(*pr->out));
    pr->gone = util_calloc(p->n, sizeof(*pr->gone));
    pr->holder = util_calloc(p->n, sizeof(*pr->holder));
    pr->held = util_calloc(2 * (size_t)p->m, sizeof(*pr->held));
    if (!pr->out || !pr->gone || !pr->holder || !pr->held)
        return STRATA_ERR_NOMEM;
    for (uint32_t l = 0; l < p->n; l++) {
        pr->out[l].clock = -1;
        pr->holder[l] = l;
    }
    pr->place = a->shard;
    pr->payload = eng_protect_payload(a, a->shard);
    pr->snap = util_aligned_alloc(64, (size_t)p->k * p->frag);
    pr->kept = util_aligned_alloc(64, (size_t)p->k * p->frag);
    if (!pr->snap || !pr->kept)
        return STRATA_ERR_NOMEM;
    memset(pr->snap, 0, (size_t)p->k * p->frag);
    memset(pr->kept, 0, (size_t)p->k * p->frag);
    eng_protect_offsets(a, a->shard);
    st = eng_protect_held_add(a, pr, a->shard);
    if (st != STRATA_OK)
        return st;
    util_info("shard %u: protected every %" PRId64 " clocks by %u parity "
              "fragments across %d aggregators (%" PRIu64 " bytes each)",
              a->shard, every, m, ctx->naggs, p->frag);
    eng_protect_report(ctx, pr->next); /* nothing to do here: done */
    return STRATA_OK;
}

/* How far protection follows this shard: the furthest of its partitions'
 * least clocks (each its slowest group's), 0 when it has none. The
 * coordinator names the next clock past every aggregator's. */
static int64_t eng_protect_reached(const eng_agg_t *a)
{
    int64_t reached = 0;
    for (uint32_t i = 0; i < a->nparts; i++) {
        int64_t c = eng_tracker_min_clock(a->parts[i].tracker);
        if (c != ENG_TRACKER_INF && c > reached)
            reached = c;
    }
    return reached;
}

/* PROTECTED of a clock to the coordinator: this aggregator's part of it
 * done, with its snapshot's CRC32C. */
static void eng_protect_say(strata_ctx_t *ctx, int64_t clock)
{
    struct eng_agg_protect *pr = ctx->agg->prot;
    pr->reported = clock;
    unsigned char buf[40];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_PROTECTED);
    eng_put_i64(&w, clock);
    eng_put_u8(&w, 0); /* missed: a partition past the clock is copied */
    eng_put_u32(&w, pr->snap_crc);
    eng_put_i64(&w, eng_protect_reached(ctx->agg));
    strata_status_t st = eng_send(&ctx->coord_peer, &w, NULL);
    if (st != STRATA_OK) /* the coordinator is gone: its disconnect says */
        util_debug("cannot say PROTECTED of clock %" PRId64 ": %s", clock,
                   strata_strerror(st));
}

/* Says PROTECTED of the named clock once this aggregator's part of it is
 * done: its pieces of the clock all sent (an aggregator without partitions
 * has none) and every parity fragment it holds that is not all zero sealed
 * at that clock. */
static void eng_protect_report(strata_ctx_t *ctx, int64_t clock)
{
    eng_agg_t *a = ctx->agg;
    struct eng_agg_protect *pr = a->prot;
    if (clock != pr->next || clock <= pr->reported ||
        (a->nparts && (pr->snap_clock != clock || pr->cursor < pr->total)))
        return;
    for (uint32_t h = 0; h < pr->nheld; h++)
        if (pr->held[h].want && pr->held[h].sealed.clock != clock)
            return;
    eng_protect_say(ctx, clock);
}

static void eng_protect_copy(eng_agg_t *a, const eng_apart_t *ap)
{
    unsigned char *snap = a->prot->snap;
    size_t n = ap->part->count * sizeof(float);
    uint64_t off = ap->prot_off;
    memcpy(snap + ap->part->shard_off, eng_agg_model(a, ap), ap->part->bytes);
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
    if (!pr || pr->next == 0 || pr->snap_clock == pr->next)
        return;
    /* at the clock or past it (ENG_TRACKER_INF: no worker left to move
     * it) */
    if (eng_tracker_min_clock(ap->tracker) < pr->next ||
        ap->prot_at == pr->next)
        return;
    eng_protect_copy(a, ap);
    ap->prot_at = pr->next;
    if (++pr->ncopied < a->nparts)
        return;
    const eng_protect_t *p = &pr->geo;
    uint64_t chunks = eng_protect_chunks(p);
    pr->snap_clock = pr->next;
    pr->snap_crc = strata_crc32c(0, pr->snap, pr->payload);
    pr->cursor = 0;
    pr->total = eng_protect_npieces(p, pr->payload) * p->m * chunks;
    pr->ncopied = 0;
    eng_agg_protect_flush(ctx);
}

/* The snapshot's pieces, while the control backlog is empty. */
static void eng_protect_add_piece(strata_ctx_t *ctx, eng_held_t *h, uint32_t i,
                                  int64_t clock, uint64_t off, uint32_t len,
                                  const unsigned char *bytes);
static eng_held_t *eng_protect_held_of(struct eng_agg_protect *pr, uint32_t s,
                                       uint32_t index);

static void eng_protect_send_pieces(strata_ctx_t *ctx)
{
    eng_agg_t *a = ctx->agg;
    struct eng_agg_protect *pr = a->prot;
    const eng_protect_t *p = &pr->geo;
    uint64_t chunks = eng_protect_chunks(p);
    while (pr->cursor < pr->total && !ctx->msgs.head) {
        uint32_t i = (uint32_t)(pr->cursor / (p->m * chunks));
        uint32_t j = (uint32_t)(pr->cursor / chunks % p->m);
        uint64_t off = pr->cursor % chunks * ENG_PROTECT_CHUNK;
        uint64_t len = eng_protect_chunk_len(p, off);
        uint32_t s = eng_protect_data_stripe(p, pr->place, i);
        uint32_t to = pr->holder[eng_protect_holder(p, s, p->k + j)];
        const unsigned char *piece = pr->snap + (uint64_t)i * p->frag + off;
        if (to == a->shard) { /* a spare's own place holds that parity */
            pr->cursor++;
            eng_protect_add_piece(ctx, eng_protect_held_of(pr, s, p->k + j), i,
                                  pr->snap_clock, off, (uint32_t)len, piece);
            if (pr->cursor == pr->total)
                eng_protect_report(ctx, pr->snap_clock);
            continue;
        }
        unsigned char buf[TP_MSG_MAX];
        eng_wbuf_t w;
        eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_PIECE);
        eng_put_u32(&w, to);
        eng_put_u32(&w, p->m);
        eng_put_u64(&w, p->frag);
        eng_put_u32(&w, s);
        eng_put_u32(&w, i);
        eng_put_u32(&w, j);
        eng_put_i64(&w, pr->snap_clock);
        eng_put_u64(&w, off);
        eng_put_bytes(&w, piece, (uint32_t)len);
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

/* The parity fragment (stripe s, index) held here, or NULL. */
static eng_held_t *eng_protect_held_of(struct eng_agg_protect *pr, uint32_t s,
                                       uint32_t index)
{
    for (uint32_t h = 0; h < pr->nheld; h++)
        if (pr->held[h].sealed.stripe == s && pr->held[h].sealed.index == index)
            return &pr->held[h];
    return NULL;
}

/* The fragment of stripe s at `clock` of a place held here (data from the
 * kept snapshot, or zero for a spare's own place; parity it holds), or
 * NULL if it has none of that clock. */
static const eng_frag_t *eng_protect_mine(strata_ctx_t *ctx, uint32_t s,
                                          uint32_t place, int64_t clock,
                                          eng_frag_t *data)
{
    eng_agg_t *a = ctx->agg;
    struct eng_agg_protect *pr = a->prot;
    const eng_protect_t *p = &pr->geo;
    uint32_t f = (place + p->n - s) % p->n; /* eng_protect_holder's inverse */
    if (f < p->k) {
        bool empty = place != pr->place || (a->nparts == 0 && pr->payload == 0);
        if (pr->kept_clock != clock && !empty)
            return NULL;
        *data = (eng_frag_t){.stripe = s, .index = f, .clock = clock};
        data->bytes =
            place != pr->place ? pr->zero : pr->kept + (uint64_t)f * p->frag;
        data->crc = strata_crc32c(0, data->bytes, p->frag);
        return data;
    }
    eng_held_t *h = eng_protect_held_of(pr, s, f);
    if (!h->want && h->agreed.clock != clock) { /* an all-zero stripe */
        memset(h->agreed.bytes, 0, p->frag);
        h->agreed.clock = clock;
        eng_protect_seal(p, &h->agreed);
    }
    return h->agreed.clock == clock ? &h->agreed : NULL;
}

/* REBUILT to the coordinator: the outcome of a rebuild (why: "" if ok). */
static void eng_protect_rebuilt(strata_ctx_t *ctx, uint32_t lost, int64_t clock,
                                uint64_t bytes, const char *why)
{
    unsigned char buf[TP_MSG_MAX];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_REBUILT);
    eng_put_u32(&w, lost);
    eng_put_i64(&w, clock);
    eng_put_u8(&w, why[0] == '\0');
    eng_put_u64(&w, bytes);
    eng_put_str(&w, why);
    if (why[0] == '\0')
        eng_metrics_stamp(&ctx->cnt.tk_rebuilt_ns);
    if (eng_send(&ctx->coord_peer, &w, NULL) != STRATA_OK)
        util_debug("cannot say REBUILT of shard %u", lost);
}

/* This aggregator's fragments of lost shards' stripes, to their
 * rebuilders, while the control backlog is empty. */
static void eng_protect_send_frags(strata_ctx_t *ctx)
{
    eng_agg_t *a = ctx->agg;
    struct eng_agg_protect *pr = a->prot;
    const eng_protect_t *p = &pr->geo;
    uint64_t chunks = eng_protect_chunks(p);
    for (uint32_t lost = 0; lost < p->n; lost++) {
        eng_send_frags_t *o = &pr->out[lost];
        while (o->cursor < o->total && !ctx->msgs.head) {
            uint32_t i = (uint32_t)(o->cursor / (pr->nplaces * chunks));
            uint32_t q = pr->places[o->cursor / chunks % pr->nplaces];
            uint64_t off = o->cursor % chunks * ENG_PROTECT_CHUNK;
            uint64_t len = eng_protect_chunk_len(p, off);
            uint32_t s = eng_protect_data_stripe(p, lost, i);
            eng_frag_t data;
            const eng_frag_t *f = eng_protect_mine(ctx, s, q, o->clock, &data);
            if (!f) {
                char why[160];
                snprintf(why, sizeof(why),
                         "aggregator %u holds no fragment of stripe %u at "
                         "clock %" PRId64,
                         a->shard, s, o->clock);
                eng_protect_rebuilt(ctx, lost, o->clock, 0, why);
                o->cursor = o->total;
                break;
            }
            unsigned char buf[TP_MSG_MAX];
            eng_wbuf_t w;
            eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_FRAG);
            eng_put_u32(&w, o->to);
            eng_put_u32(&w, lost);
            eng_put_u32(&w, s);
            eng_put_u32(&w, f->index);
            eng_put_i64(&w, f->clock);
            eng_put_u32(&w, f->crc);
            eng_put_u64(&w, off);
            eng_put_bytes(&w, f->bytes + off, (uint32_t)len);
            if (eng_send(&ctx->coord_peer, &w, NULL) != STRATA_OK) {
                o->cursor = o->total; /* the coordinator is gone */
                return;
            }
            o->cursor++;
        }
    }
}

void eng_agg_protect_flush(strata_ctx_t *ctx)
{
    if (!ctx->agg->prot)
        return;
    eng_protect_send_pieces(ctx);
    eng_protect_send_frags(ctx);
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

/* A chunk of data fragment i of held fragment h's stripe at `clock`. */
static void eng_protect_add_piece(strata_ctx_t *ctx, eng_held_t *h, uint32_t i,
                                  int64_t clock, uint64_t off, uint32_t len,
                                  const unsigned char *bytes)
{
    const eng_protect_t *p = &ctx->agg->prot->geo;
    if (clock <= h->sealed.clock || clock < h->building.clock)
        return; /* a newer protection is under way */
    if (clock > h->building.clock) {
        if (h->in)
            util_debug("shard %u: parity fragment %u of stripe %u of clock "
                       "%" PRId64 " abandoned for clock %" PRId64,
                       ctx->agg->shard, h->sealed.index, h->sealed.stripe,
                       h->building.clock, clock);
        eng_protect_parity_reset(p, &h->building, h->sealed.stripe,
                                 h->sealed.index, clock);
        h->in = 0;
    }
    eng_protect_parity_add_at(p, &h->building, i, off, len, bytes);
    h->in += len;
    if (h->in == h->want)
        eng_protect_held_seal(ctx, h);
}

static strata_status_t eng_protect_on_piece(strata_ctx_t *ctx, eng_rbuf_t *r)
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
    if (pr->geo.m != m || pr->geo.frag != frag) {
        util_error("shard %u: a protection piece of %u parity fragments of "
                   "%" PRIu64 " bytes came, but here %u of %" PRIu64
                   ": STRATA_PROTECT_EVERY and STRATA_PROTECT_PARITY must be "
                   "the same on every aggregator",
                   a->shard, m, frag, pr->geo.m, pr->geo.frag);
        return STRATA_ERR_CONFIG;
    }
    const eng_protect_t *p = &pr->geo;
    eng_held_t *h = j < p->m ? eng_protect_held_of(pr, s, p->k + j) : NULL;
    if (dst != a->shard || i >= p->k || !h || clock < 1 || off > frag ||
        len > frag - off || len % 64) {
        util_error("shard %u: a protection piece that does not fit here "
                   "(for aggregator %u, stripe %u, piece %u, parity %u, "
                   "bytes %" PRIu64 "+%u of %" PRIu64 ")",
                   a->shard, dst, s, i, j, off, len, frag);
        return STRATA_ERR_PROTO;
    }
    if (!pr->over)
        eng_protect_add_piece(ctx, h, i, clock, off, len, bytes);
    return STRATA_OK;
}

/* PROTECT: the coordinator agreed a clock (its data and parity are kept
 * until the next is agreed) and names the next one to protect. */
static strata_status_t eng_protect_on_protect(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    struct eng_agg_protect *pr = a->prot;
    int64_t agreed = eng_get_i64(r), next = eng_get_i64(r);
    if (!eng_rbuf_ok(r) || agreed < 0 || next < 1)
        return STRATA_ERR_PROTO;
    if (pr->over)
        return STRATA_OK; /* one said before the takeover ended it */
    if (agreed > pr->kept_clock && agreed == pr->snap_clock) {
        unsigned char *t = pr->kept;
        pr->kept = pr->snap;
        pr->snap = t;
        pr->kept_clock = agreed;
    }
    if (agreed > 0)
        eng_metrics_protected(ctx, agreed);
    for (uint32_t j = 0; j < pr->nheld; j++) {
        eng_held_t *h = &pr->held[j];
        if (agreed > 0 && h->sealed.clock == agreed) {
            eng_frag_t t = h->agreed;
            h->agreed = h->sealed;
            h->sealed = t;
        }
    }
    if (pr->cursor < pr->total)
        util_debug("shard %u: the pieces of clock %" PRId64 " abandoned",
                   a->shard, pr->snap_clock);
    pr->cursor = pr->total;
    pr->next = next;
    pr->ncopied = 0;
    for (uint32_t i = 0; i < a->nparts && pr->next; i++)
        eng_agg_protect_note(ctx, i); /* one already at the clock */
    eng_protect_report(ctx, next);
    return STRATA_OK;
}

/* Slot of fragment `index` of the lost shard's stripe i in rb->have. */
static uint32_t eng_rebuild_slot(const eng_protect_t *p, uint32_t i,
                                 uint32_t index)
{
    return i * (p->n - 1) + (index < i ? index : index - 1);
}

static void eng_rebuild_free(eng_rebuild_t *rb, uint32_t nfrags)
{
    if (!rb)
        return;
    for (uint32_t f = 0; rb->have && f < nfrags; f++)
        util_free(rb->have[f].bytes);
    util_free(rb->have);
    util_free(rb->got);
    util_free(rb->shard);
    util_free(rb);
}

/* Once the fragment of every aggregator not lost is in: decode the shard
 * (ISA-L, from any k good fragments of each stripe) and check it against
 * what the lost aggregator said of it. */
static void eng_protect_decode(strata_ctx_t *ctx)
{
    eng_agg_t *a = ctx->agg;
    struct eng_agg_protect *pr = a->prot;
    const eng_protect_t *p = &pr->geo;
    eng_rebuild_t *rb = pr->rb;
    if (!rb || rb->decoded)
        return;
    for (uint32_t i = 0; i < p->k; i++) {
        uint32_t s = eng_protect_data_stripe(p, rb->lost, i);
        for (uint32_t f = 0; f < p->n; f++) {
            uint32_t h = eng_protect_holder(p, s, f);
            if (f != i && !pr->gone[h] &&
                rb->got[eng_rebuild_slot(p, i, f)] < p->frag)
                return;
        }
    }
    rb->decoded = true;
    char why[200] = "";
    uint64_t bytes = eng_protect_payload(a, rb->lost);
    for (uint32_t i = 0; i < p->k && !why[0]; i++) {
        uint32_t s = eng_protect_data_stripe(p, rb->lost, i);
        if (eng_protect_rebuild(p, s, rb->clock, &rb->have[i * (p->n - 1)],
                                p->n - 1, i,
                                rb->shard + (uint64_t)i * p->frag) != STRATA_OK)
            snprintf(why, sizeof(why),
                     "stripe %u has fewer than %u good fragments", s, p->k);
    }
    uint32_t crc = strata_crc32c(0, rb->shard, bytes);
    if (!why[0] && crc != rb->crc)
        snprintf(why, sizeof(why),
                 "the rebuilt shard's CRC32C is %08x, the lost aggregator's "
                 "snapshot had %08x",
                 crc, rb->crc);
    rb->intact = !why[0];
    if (!why[0])
        util_info("shard %u: rebuilt the shard of aggregator %u at clock "
                  "%" PRId64 " (%" PRIu64 " bytes, CRC32C %08x)",
                  a->shard, rb->lost, rb->clock, bytes, crc);
    eng_protect_rebuilt(ctx, rb->lost, rb->clock, bytes, why);
    /* Only the shard is needed from here on. */
    for (uint32_t f = 0; f < p->k * (p->n - 1); f++) {
        util_free(rb->have[f].bytes);
        rb->have[f].bytes = NULL;
    }
}

/* The rebuilder's buffers, and its own fragments in them. */
static strata_status_t eng_protect_rebuild_start(strata_ctx_t *ctx,
                                                 uint32_t lost, int64_t clock,
                                                 uint32_t crc)
{
    eng_agg_t *a = ctx->agg;
    struct eng_agg_protect *pr = a->prot;
    const eng_protect_t *p = &pr->geo;
    uint32_t nfrags = p->k * (p->n - 1);
    eng_rebuild_t *rb = util_calloc(1, sizeof(*rb));
    if (!rb || !(rb->have = util_calloc(nfrags, sizeof(*rb->have))) ||
        !(rb->got = util_calloc(nfrags, sizeof(*rb->got))) ||
        !(rb->shard = util_aligned_alloc(64, (size_t)p->k * p->frag)))
        goto nomem;
    pr->rb = rb;
    rb->lost = lost;
    rb->clock = clock;
    rb->crc = crc;
    for (uint32_t f = 0; f < nfrags; f++) {
        rb->have[f].clock = -1;
        if (!(rb->have[f].bytes = util_aligned_alloc(64, p->frag)))
            goto nomem;
    }
    for (uint32_t n = 0; n < p->k * pr->nplaces; n++) {
        uint32_t i = n / pr->nplaces;
        uint32_t s = eng_protect_data_stripe(p, lost, i);
        eng_frag_t data;
        const eng_frag_t *f =
            eng_protect_mine(ctx, s, pr->places[n % pr->nplaces], clock, &data);
        if (!f) {
            char why[160];
            snprintf(why, sizeof(why),
                     "aggregator %u holds no fragment of stripe %u at clock "
                     "%" PRId64,
                     a->shard, s, clock);
            rb->decoded = true;
            eng_protect_rebuilt(ctx, lost, clock, 0, why);
            return STRATA_OK;
        }
        uint32_t slot = eng_rebuild_slot(p, i, f->index);
        eng_frag_t *h = &rb->have[slot];
        unsigned char *bytes = h->bytes;
        *h = *f;
        h->bytes = bytes;
        memcpy(h->bytes, f->bytes, p->frag);
        rb->got[slot] = p->frag;
    }
    eng_protect_decode(ctx);
    return STRATA_OK;
nomem:
    if (rb && rb != pr->rb)
        eng_rebuild_free(rb, nfrags);
    util_error("out of memory for rebuilding the shard of aggregator %u", lost);
    return STRATA_ERR_NOMEM;
}

/* REBUILD: aggregator `lost` is gone; send this one's fragments of its
 * stripes at `clock` to aggregator `by`, which rebuilds it (again, to
 * another, if its first rebuilder is lost too). A rebuild here no longer
 * awaits the lost aggregator's fragments. */
static strata_status_t eng_protect_on_rebuild(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    struct eng_agg_protect *pr = a->prot;
    const eng_protect_t *p = &pr->geo;
    uint32_t lost = eng_get_u32(r);
    int64_t clock = eng_get_i64(r);
    uint32_t by = eng_get_u32(r), crc = eng_get_u32(r);
    if (!eng_rbuf_ok(r) || lost >= p->n || by >= p->n || lost == a->shard ||
        pr->holder[lost] != lost || by == lost || clock < 1 || pr->gone[by] ||
        (by == a->shard && pr->rb && pr->rb->lost != lost))
        return STRATA_ERR_PROTO;
    util_info("shard %u: aggregator %u is lost; its shard is rebuilt at "
              "clock %" PRId64 " by aggregator %u",
              a->shard, lost, clock, by);
    pr->gone[lost] = true;
    pr->out[lost] = (eng_send_frags_t){.clock = -1};
    if (by == a->shard)
        return pr->rb ? STRATA_OK
                      : eng_protect_rebuild_start(ctx, lost, clock, crc);
    pr->out[lost] =
        (eng_send_frags_t){.clock = clock,
                           .to = by,
                           .total = p->k * pr->nplaces * eng_protect_chunks(p)};
    if (pr->rb && pr->rb->lost != lost && !pr->rb->decoded) {
        for (uint32_t i = 0; i < p->k; i++) {
            uint32_t s = eng_protect_data_stripe(p, pr->rb->lost, i);
            uint32_t f = (lost + p->n - s) % p->n; /* lost's index in s */
            pr->rb->have[eng_rebuild_slot(p, i, f)].clock = -1;
        }
        eng_protect_decode(ctx);
    }
    eng_agg_protect_flush(ctx);
    return STRATA_OK;
}

/* FRAG: a chunk of a survivor's fragment of the shard rebuilt here. */
static strata_status_t eng_protect_on_frag(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    struct eng_agg_protect *pr = a->prot;
    const eng_protect_t *p = &pr->geo;
    eng_rebuild_t *rb = pr->rb;
    uint32_t dst = eng_get_u32(r), lost = eng_get_u32(r);
    uint32_t s = eng_get_u32(r), index = eng_get_u32(r);
    int64_t clock = eng_get_i64(r);
    uint32_t crc = eng_get_u32(r);
    uint64_t off = eng_get_u64(r);
    uint32_t len;
    const unsigned char *bytes = eng_get_bytes(r, &len);
    uint32_t i = 0;
    while (i < p->k && eng_protect_data_stripe(p, lost, i) != s)
        i++;
    if (!eng_rbuf_ok(r) || !rb || dst != a->shard || lost != rb->lost ||
        i == p->k || index >= p->n || index == i || off > p->frag ||
        len > p->frag - off)
        return STRATA_ERR_PROTO;
    uint32_t slot = eng_rebuild_slot(p, i, index);
    if (rb->decoded || pr->gone[eng_protect_holder(p, s, index)])
        return STRATA_OK; /* its sender was lost meanwhile */
    if (rb->got[slot] + len > p->frag)
        return STRATA_ERR_PROTO;
    eng_frag_t *h = &rb->have[slot];
    h->stripe = s;
    h->index = index;
    h->clock = clock;
    h->crc = crc;
    memcpy(h->bytes + off, bytes, len);
    rb->got[slot] += len;
    eng_protect_decode(ctx);
    return STRATA_OK;
}

strata_status_t eng_agg_protect_msg(strata_ctx_t *ctx, unsigned type,
                                    eng_rbuf_t *r)
{
    if (!ctx->agg->prot) {
        util_error("shard %u: a shard protection message %s came, but "
                   "STRATA_PROTECT_EVERY is off here: it must be the same on "
                   "every aggregator",
                   ctx->agg->shard, eng_msg_name(type));
        return STRATA_ERR_CONFIG;
    }
    switch (type) {
    case ENG_MSG_PIECE:
        return eng_protect_on_piece(ctx, r);
    case ENG_MSG_PROTECT:
        return eng_protect_on_protect(ctx, r);
    case ENG_MSG_REBUILD:
        return eng_protect_on_rebuild(ctx, r);
    case ENG_MSG_FRAG:
        return eng_protect_on_frag(ctx, r);
    default:
        return STRATA_ERR_PROTO;
    }
}

const unsigned char *eng_agg_protect_rebuilt(const eng_agg_t *a, uint32_t lost,
                                             int64_t clock)
{
    const eng_rebuild_t *rb = a->prot ? a->prot->rb : NULL;
    return rb && rb->intact && rb->lost == lost && rb->clock == clock
               ? rb->shard
               : NULL;
}

static void eng_agg_protect_stop(eng_agg_t *a)
{
    struct eng_agg_protect *pr = a->prot;
    if (!pr)
        return;
    pr->next = 0;
    pr->cursor = pr->total;
    for (uint32_t l = 0; l < pr->geo.n; l++)
        pr->out[l].cursor = pr->out[l].total;
    /* A shard rebuilt here is kept until it is taken over here: the
     * takeovers of shards lost at once come one after the other. */
    const eng_layout_t *lay = a->layout;
    const eng_rebuild_t *rb = pr->rb;
    if (rb && rb->intact && lay->shard_nparts[rb->lost] &&
        lay->parts[lay->shard_parts[rb->lost][0]].holder == rb->lost)
        return;
    eng_rebuild_free(pr->rb, pr->geo.k * (pr->geo.n - 1));
    pr->rb = NULL;
}

/* A spare took shard `lost` over: it holds that place from now on, so the
 * stripes stay; what was kept or under way at the old holders is dropped,
 * and protection starts again at the next clock the coordinator names. */
static strata_status_t eng_protect_resume(strata_ctx_t *ctx, uint32_t lost,
                                          uint32_t taker)
{
    eng_agg_t *a = ctx->agg;
    struct eng_agg_protect *pr = a->prot;
    const eng_protect_t *p = &pr->geo;
    pr->holder[lost] = taker;
    pr->gone[lost] = false;
    pr->next = pr->ncopied = 0;
    pr->cursor = pr->total;
    pr->snap_clock = pr->kept_clock = -1;
    for (uint32_t l = 0; l < p->n; l++)
        pr->out[l] = (eng_send_frags_t){.clock = -1};
    for (uint32_t h = 0; h < pr->nheld; h++) {
        pr->held[h].agreed.clock = pr->held[h].sealed.clock = -1;
        pr->held[h].building.clock = -1;
        pr->held[h].in = 0;
    }
    if (taker != a->shard)
        return STRATA_OK;
    /* Here: the shard's place, its snapshot, and zero for the own data. */
    pr->zero = util_aligned_alloc(64, p->frag);
    if (!pr->zero)
        return STRATA_ERR_NOMEM;
    memset(pr->zero, 0, p->frag);
    pr->place = lost;
    pr->payload = eng_protect_payload(a, lost);
    eng_protect_offsets(a, lost);
    util_info("shard %u: holds the place of shard %u in the protection "
              "from now on (its pieces and %u parity fragments)",
              a->shard, lost, p->m);
    return eng_protect_held_add(a, pr, lost);
}

strata_status_t eng_agg_protect_moved(strata_ctx_t *ctx, uint32_t lost,
                                      uint32_t taker)
{
    eng_agg_t *a = ctx->agg;
    struct eng_agg_protect *pr = a->prot;
    const bool *spare = eng_spare_shards(ctx);
    if (!pr || pr->over)
        return STRATA_OK;
    /* A spare holds one place of its own, with no data, and room for one
     * more (the coordinator picks a taker that took none yet); it takes a
     * spare's place over only as a survivor would. */
    if (spare && spare[taker] && !spare[lost]) {
        eng_rebuild_t *rb = pr->rb;
        if (!rb || rb->lost == lost) { /* one rebuilt for later is kept */
            eng_rebuild_free(pr->rb, pr->geo.k * (pr->geo.n - 1));
            pr->rb = NULL;
        }
        return eng_protect_resume(ctx, lost, taker);
    }
    pr->over = true;
    eng_agg_protect_stop(a);
    return STRATA_OK;
}

void eng_agg_protect_free(eng_agg_t *a)
{
    struct eng_agg_protect *pr = a->prot;
    if (!pr)
        return;
    for (uint32_t j = 0; pr->held && j < pr->nheld; j++) {
        eng_held_t *h = &pr->held[j];
        if (h->sealed.clock >= 0 && h->sealed.bytes)
            eng_protect_intact(&pr->geo, &h->sealed);
        if (h->agreed.clock >= 0 && h->agreed.bytes)
            eng_protect_intact(&pr->geo, &h->agreed);
        util_free(h->agreed.bytes);
        util_free(h->sealed.bytes);
        util_free(h->building.bytes);
    }
    eng_rebuild_free(pr->rb, pr->geo.k * (pr->geo.n - 1));
    util_free(pr->held);
    util_free(pr->out);
    util_free(pr->gone);
    util_free(pr->holder);
    util_free(pr->zero);
    util_free(pr->snap);
    util_free(pr->kept);
    eng_protect_fini(&pr->geo);
    util_free(pr);
    a->prot = NULL;
}
