/* Reed-Solomon protection of shards across aggregators (engine/protect.h). */
#include "engine/protect.h"

#include <inttypes.h>
#include <string.h>

#include <strata/strata_agg.h>

#include "util/log.h"

/* Fragments are a multiple of this: ISA-L's vector paths take whole
 * 64-byte blocks. */
#define ENG_PROTECT_ALIGN 64

strata_status_t eng_protect_init(uint32_t naggs, uint32_t m, uint64_t max_shard,
                                 eng_protect_t *p)
{
    *p = (eng_protect_t){0};
    if (m < 1 || m >= naggs || naggs > AGG_EC_MAX_FRAGMENTS) {
        util_error("shard protection with %u parity fragments across %u "
                   "aggregators: needs at least one parity fragment, fewer "
                   "than the aggregators, and at most %d aggregators",
                   m, naggs, AGG_EC_MAX_FRAGMENTS);
        return STRATA_ERR_CONFIG;
    }
    p->n = naggs;
    p->m = m;
    p->k = naggs - m;
    uint64_t f = (max_shard + p->k - 1) / p->k;
    f = (f + ENG_PROTECT_ALIGN - 1) / ENG_PROTECT_ALIGN * ENG_PROTECT_ALIGN;
    p->frag = f ? f : ENG_PROTECT_ALIGN;
    return agg_ec_create(p->k, p->m, &p->ec);
}

void eng_protect_fini(eng_protect_t *p)
{
    agg_ec_destroy(p->ec);
    p->ec = NULL;
}

uint32_t eng_protect_data_stripe(const eng_protect_t *p, uint32_t a, uint32_t i)
{
    return (a + p->n - i) % p->n;
}

uint32_t eng_protect_parity_stripe(const eng_protect_t *p, uint32_t a,
                                   uint32_t j)
{
    return (a + 2 * p->n - p->k - j) % p->n;
}

uint32_t eng_protect_holder(const eng_protect_t *p, uint32_t s, uint32_t f)
{
    return (s + f) % p->n;
}

void eng_protect_piece(const eng_protect_t *p, const void *shard,
                       uint64_t shard_bytes, uint32_t i, unsigned char *out)
{
    uint64_t off = (uint64_t)i * p->frag;
    uint64_t n = off >= shard_bytes            ? 0
                 : shard_bytes - off < p->frag ? shard_bytes - off
                                               : p->frag;
    memcpy(out, (const char *)shard + off, n);
    memset(out + n, 0, p->frag - n);
}

void eng_protect_parity_reset(const eng_protect_t *p, eng_frag_t *f,
                              uint32_t stripe, uint32_t index, int64_t clock)
{
    f->stripe = stripe;
    f->index = index;
    f->clock = clock;
    memset(f->bytes, 0, p->frag);
}

void eng_protect_parity_add(const eng_protect_t *p, eng_frag_t *f,
                            uint32_t data_index, const unsigned char *piece)
{
    eng_protect_parity_add_at(p, f, data_index, 0, p->frag, piece);
}

void eng_protect_parity_add_at(const eng_protect_t *p, eng_frag_t *f,
                               uint32_t data_index, uint64_t off, uint64_t len,
                               const unsigned char *bytes)
{
    agg_ec_encode_update(p->ec, len, data_index, f->index - p->k, bytes,
                         f->bytes + off);
}

void eng_protect_seal(const eng_protect_t *p, eng_frag_t *f)
{
    f->crc = strata_crc32c(0, f->bytes, p->frag);
}

const char *eng_protect_loss_note(const eng_config_t *cfg, bool sum_only)
{
    if (!eng_config_int(cfg, ENG_CFG_PROTECT_EVERY))
        return "";
    if (sum_only) /* why: docs/engine.md */
        return " (STRATA_PROTECT_EVERY with STRATA_OPTIMIZER=sum: nothing is "
               "protected, no shard is taken over: the sums of the clocks in "
               "flight were only on that aggregator and on the workers it "
               "wrote them to)";
    return " (STRATA_PROTECT_EVERY: its shard is taken over only once a clock "
           "of the shards is protected)";
}

int eng_protect_taker(const uint32_t *held, const bool *alive, uint32_t n)
{
    int best = -1;
    for (uint32_t a = 0; a < n; a++)
        if (alive[a] && (best < 0 || held[a] < held[best]))
            best = (int)a;
    return best;
}

bool eng_protect_intact(const eng_protect_t *p, const eng_frag_t *f)
{
    if (strata_crc32c(0, f->bytes, p->frag) == f->crc)
        return true;
    util_warn("fragment %u of stripe %u (clock %" PRId64
              ", held by aggregator %u) fails its CRC32C: not used",
              f->index, f->stripe, f->clock,
              eng_protect_holder(p, f->stripe, f->index));
    return false;
}

strata_status_t eng_protect_rebuild(const eng_protect_t *p, uint32_t s,
                                    int64_t clock, const eng_frag_t *have,
                                    uint32_t nhave, uint32_t want,
                                    unsigned char *out)
{
    unsigned idx[AGG_EC_MAX_FRAGMENTS];
    const unsigned char *frags[AGG_EC_MAX_FRAGMENTS];
    unsigned char *data[AGG_EC_MAX_FRAGMENTS];
    uint32_t good = 0;
    bool seen[AGG_EC_MAX_FRAGMENTS] = {false};
    for (uint32_t h = 0; h < nhave && good < p->k; h++) {
        const eng_frag_t *f = &have[h];
        if (f->stripe != s || f->clock != clock || f->index >= p->n ||
            seen[f->index])
            continue;
        if (!eng_protect_intact(p, f))
            continue;
        seen[f->index] = true;
        idx[good] = f->index;
        frags[good++] = f->bytes;
    }
    if (good < p->k) {
        util_error("stripe %u cannot be rebuilt at clock %" PRId64
                   ": %u good fragments of the %u needed",
                   s, clock, good, p->k);
        return STRATA_ERR_STATE;
    }
    for (uint32_t j = 0; j < p->k; j++)
        data[j] = j == want ? out : NULL;
    strata_status_t st = agg_ec_decode(p->ec, p->frag, idx, frags, data);
    return st;
}
