/*
 * Shards protected across aggregators (engine/protect.h), every aggregator
 * simulated in one process: any m lost at once are rebuilt exactly from
 * what the others hold; a fragment whose bytes no longer match its CRC32C
 * is not used; fragments of another clock are not used.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/protect.h"
#include "tests/support/test_log.h"

#define MAXN 8

typedef struct sim {
    eng_protect_t p;
    unsigned char *shard[MAXN];
    uint64_t bytes[MAXN];
    eng_frag_t dat[MAXN * MAXN]; /* aggregator a's piece i: [a * k + i] */
    eng_frag_t par[MAXN * MAXN]; /* aggregator a's parity j: [a * m + j] */
} sim_t;

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static unsigned char rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned char)(rng >> 24);
}

/* Every aggregator snapshots its shard and builds its parity fragments from
 * the pieces the stripes' data holders send it. */
static void sim_protect(sim_t *s, uint32_t n, uint32_t m, const uint64_t *bytes,
                        int64_t clock)
{
    uint64_t max = 0;
    for (uint32_t a = 0; a < n; a++)
        max = bytes[a] > max ? bytes[a] : max;
    assert_int_equal(eng_protect_init(n, m, max, &s->p), STRATA_OK);
    const eng_protect_t *p = &s->p;
    for (uint32_t a = 0; a < n; a++) {
        s->bytes[a] = bytes[a];
        s->shard[a] = malloc(bytes[a] ? bytes[a] : 1);
        for (uint64_t b = 0; b < bytes[a]; b++)
            s->shard[a][b] = rnd();
        for (uint32_t i = 0; i < p->k; i++) {
            eng_frag_t *f = &s->dat[a * p->k + i];
            *f = (eng_frag_t){.stripe = eng_protect_data_stripe(p, a, i),
                              .index = i,
                              .clock = clock,
                              .bytes = malloc(p->frag)};
            eng_protect_piece(p, s->shard[a], bytes[a], i, f->bytes);
            eng_protect_seal(p, f);
        }
    }
    for (uint32_t a = 0; a < n; a++)
        for (uint32_t j = 0; j < m; j++) {
            eng_frag_t *f = &s->par[a * m + j];
            f->bytes = malloc(p->frag);
            uint32_t st = eng_protect_parity_stripe(p, a, j);
            assert_int_equal(eng_protect_holder(p, st, p->k + j), a);
            eng_protect_parity_reset(p, f, st, p->k + j, clock);
            for (uint32_t i = 0; i < p->k; i++) {
                uint32_t h = eng_protect_holder(p, st, i);
                const eng_frag_t *d = &s->dat[h * p->k + i];
                assert_int_equal(d->stripe, st);
                eng_protect_parity_add(p, f, i, d->bytes);
            }
            eng_protect_seal(p, f);
        }
}

static void sim_free(sim_t *s)
{
    const eng_protect_t *p = &s->p;
    for (uint32_t a = 0; a < p->n; a++) {
        free(s->shard[a]);
        for (uint32_t i = 0; i < p->k; i++)
            free(s->dat[a * p->k + i].bytes);
        for (uint32_t j = 0; j < p->m; j++)
            free(s->par[a * p->m + j].bytes);
    }
    eng_protect_fini(&s->p);
}

/* Aggregator a's shard from the aggregators not in lost (a bit mask):
 * status of the first stripe that failed. */
static strata_status_t sim_rebuild(sim_t *s, uint32_t lost, uint32_t a,
                                   int64_t clock, unsigned char *out)
{
    const eng_protect_t *p = &s->p;
    for (uint32_t i = 0; i < p->k; i++) {
        uint32_t st = eng_protect_data_stripe(p, a, i);
        eng_frag_t have[MAXN];
        uint32_t nhave = 0;
        for (uint32_t f = p->n; f-- > 0;) { /* parity first */
            uint32_t h = eng_protect_holder(p, st, f);
            if (lost & (1u << h))
                continue;
            have[nhave++] =
                f < p->k ? s->dat[h * p->k + f] : s->par[h * p->m + (f - p->k)];
        }
        strata_status_t r = eng_protect_rebuild(p, st, clock, have, nhave, i,
                                                out + (size_t)i * p->frag);
        if (r != STRATA_OK)
            return r;
    }
    return STRATA_OK;
}

static void check_losses(uint32_t n, uint32_t m)
{
    uint64_t bytes[MAXN];
    for (uint32_t a = 0; a < n; a++)
        bytes[a] = 1000 + 777 * a + (a == 1 ? 5000 : 0);
    bytes[n - 1] = 0; /* an aggregator with no partitions */
    sim_t s;
    sim_protect(&s, n, m, bytes, 10);
    unsigned char *out = malloc(s.p.frag * s.p.k);
    unsigned tried = 0;
    for (uint32_t lost = 1; lost < (1u << n); lost++) {
        if ((uint32_t)__builtin_popcount(lost) != m)
            continue;
        for (uint32_t a = 0; a < n; a++) {
            if (!(lost & (1u << a)))
                continue;
            memset(out, 0xa5, s.p.frag * s.p.k);
            assert_int_equal(sim_rebuild(&s, lost, a, 10, out), STRATA_OK);
            if (memcmp(out, s.shard[a], s.bytes[a]) != 0)
                fail_msg("n=%u m=%u: shard %u wrong when 0x%x are lost", n, m,
                         a, lost);
        }
        tried++;
    }
    assert_true(tried > 0);
    free(out);
    sim_free(&s);
}

static void any_m_losses_rebuilt(void **state)
{
    (void)state;
    check_losses(2, 1);
    check_losses(4, 1);
    check_losses(5, 2); /* two at once, every pair */
    check_losses(6, 3);
}

/* The parity fragment decoding would take first has a bit flipped: it is
 * named and skipped, and the shard still comes back exactly from the
 * others; with no fragment to spare the stripe cannot be rebuilt. */
static void corrupt_fragment_not_used(void **state)
{
    (void)state;
    const uint64_t bytes[4] = {4096, 3000, 5000, 100};
    sim_t s;
    sim_protect(&s, 4, 2, bytes, 20);
    const eng_protect_t *p = &s.p;
    uint32_t st = eng_protect_data_stripe(p, 0, 0);
    uint32_t h = eng_protect_holder(p, st, p->n - 1);
    s.par[h * p->m + (p->m - 1)].bytes[17] ^= 0x10;
    unsigned char *out = malloc(p->frag * p->k);
    assert_int_equal(sim_rebuild(&s, 1u << 0, 0, 20, out), STRATA_OK);
    assert_memory_equal(out, s.shard[0], s.bytes[0]);
    assert_non_null(strstr(test_log.last, "fails its CRC32C: not used"));
    /* aggregators 0 and 1 lost: stripe st keeps exactly k = 2 fragments,
     * one of them the corrupt one */
    uint32_t lost = 1u << 0 | 1u << eng_protect_holder(p, st, 1);
    if (lost & (1u << h))
        lost = 1u << 0 | 1u << eng_protect_holder(p, st, p->k);
    test_log.errors = 0;
    assert_int_equal(sim_rebuild(&s, lost, 0, 20, out), STRATA_ERR_STATE);
    assert_int_equal(test_log.errors, 1);
    assert_non_null(strstr(test_log.last, "1 good fragments of the 2"));
    free(out);
    sim_free(&s);
}

/* Fragments of an older protection are not mixed with the newer. */
static void other_clock_not_used(void **state)
{
    (void)state;
    const uint64_t bytes[3] = {1000, 1000, 1000};
    sim_t s;
    sim_protect(&s, 3, 1, bytes, 30);
    s.par[1].clock = 20; /* aggregator 1's parity */
    unsigned char *out = malloc(s.p.frag * s.p.k);
    uint32_t st = eng_protect_parity_stripe(&s.p, 1, 0);
    uint32_t victim = eng_protect_holder(&s.p, st, 0);
    assert_int_equal(sim_rebuild(&s, 1u << victim, victim, 30, out),
                     STRATA_ERR_STATE);
    free(out);
    sim_free(&s);
}

/* The survivor that takes a lost shard over: the fewest shards held, then
 * the lowest rank; none when no aggregator is left. */
static void taker_fewest_shards_then_lowest_rank(void **state)
{
    (void)state;
    uint32_t held[4] = {1, 1, 1, 1};
    bool alive[4] = {false, true, true, true};
    assert_int_equal(eng_protect_taker(held, alive, 4), 1);
    held[1] = 2; /* rank 1 took a shard over already */
    assert_int_equal(eng_protect_taker(held, alive, 4), 2);
    held[2] = 3;
    held[3] = 2; /* ranks 1 and 3 hold two each */
    assert_int_equal(eng_protect_taker(held, alive, 4), 1);
    alive[1] = alive[2] = alive[3] = false;
    assert_int_equal(eng_protect_taker(held, alive, 4), -1);
}

static void bad_geometry(void **state)
{
    (void)state;
    eng_protect_t p;
    assert_int_equal(eng_protect_init(3, 0, 100, &p), STRATA_ERR_CONFIG);
    assert_int_equal(eng_protect_init(3, 3, 100, &p), STRATA_ERR_CONFIG);
    assert_non_null(strstr(test_log.last, "fewer than the aggregators"));
    assert_int_equal(eng_protect_init(3, 2, 100, &p), STRATA_OK);
    assert_int_equal(p.frag, 128); /* 100 bytes in 1 piece, padded */
    eng_protect_fini(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(any_m_losses_rebuilt),
        cmocka_unit_test_setup_teardown(corrupt_fragment_not_used,
                                        test_log_setup, test_log_teardown),
        cmocka_unit_test_setup_teardown(other_clock_not_used, test_log_setup,
                                        test_log_teardown),
        cmocka_unit_test_setup_teardown(bad_geometry, test_log_setup,
                                        test_log_teardown),
        cmocka_unit_test(taker_fewest_shards_then_lowest_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
