/* Reed-Solomon erasure coding (agg/ec.h): any k of k + m fragments give the
 * data back, for every choice of survivors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agg/ec.h"

static uint64_t rng = 88172645463325252ull;

static unsigned char rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned char)(rng >> 24);
}

/* Random data in f[0..k), its parity in f[k..k+m). */
static void fill_and_encode(const agg_ec_t *ec, unsigned char *const *f,
                            size_t len)
{
    for (unsigned j = 0; j < agg_ec_k(ec); j++)
        for (size_t b = 0; b < len; b++)
            f[j][b] = rnd();
    agg_ec_encode(ec, len, (const unsigned char *const *)f, f + agg_ec_k(ec));
}

/* Encode random data, then decode from every k-subset of the k + m
 * fragments (at most `limit` subsets) and compare. */
static void round_trip(unsigned k, unsigned m, size_t len, unsigned limit)
{
    agg_ec_t *ec;
    assert_int_equal(agg_ec_create(k, m, &ec), STRATA_OK);
    unsigned n = k + m;
    unsigned char **frag = calloc(n, sizeof(*frag));
    unsigned char **out = calloc(k, sizeof(*out));
    for (unsigned i = 0; i < n; i++)
        frag[i] = malloc(len ? len : 1);
    for (unsigned j = 0; j < k; j++)
        out[j] = malloc(len ? len : 1);
    fill_and_encode(ec, frag, len);
    /* subsets as bit masks over n fragments (n <= 20 here) */
    unsigned tried = 0;
    for (uint32_t mask = 0; mask < (1u << n) && tried < limit; mask++) {
        if ((unsigned)__builtin_popcount(mask) != k)
            continue;
        unsigned idx[AGG_EC_MAX_FRAGMENTS];
        const unsigned char *have[AGG_EC_MAX_FRAGMENTS];
        unsigned c = 0;
        for (unsigned i = 0; i < n; i++)
            if (mask & (1u << i)) {
                idx[c] = i;
                have[c++] = frag[i];
            }
        for (unsigned j = 0; j < k; j++)
            memset(out[j], 0xa5, len);
        assert_int_equal(agg_ec_decode(ec, len, idx, have, out), STRATA_OK);
        for (unsigned j = 0; j < k; j++)
            if (memcmp(out[j], frag[j], len) != 0)
                fail_msg("k=%u m=%u: data fragment %u wrong from survivors "
                         "0x%x",
                         k, m, j, mask);
        tried++;
    }
    assert_true(tried > 0);
    for (unsigned i = 0; i < n; i++)
        free(frag[i]);
    for (unsigned j = 0; j < k; j++)
        free(out[j]);
    free(frag);
    free(out);
    agg_ec_destroy(ec);
}

static void every_subset_decodes(void **state)
{
    (void)state;
    round_trip(1, 1, 1000, 100); /* a copy */
    round_trip(2, 1, 4096, 100); /* any one lost */
    round_trip(2, 2, 333, 100);  /* any two lost, odd length */
    round_trip(3, 2, 64, 100);
    round_trip(5, 3, 10000, 100); /* all 56 subsets */
    round_trip(10, 4, 257, 200);
    round_trip(4, 0, 100, 10); /* no parity: only the data itself */
}

/* Survivors given in any order, with a data fragment decoded in place. */
static void order_and_aliasing(void **state)
{
    (void)state;
    enum { K = 3, M = 2, LEN = 512 };
    agg_ec_t *ec;
    assert_int_equal(agg_ec_create(K, M, &ec), STRATA_OK);
    unsigned char frag[K + M][LEN], copy[K][LEN];
    unsigned char *f[K + M];
    for (int i = 0; i < K + M; i++)
        f[i] = frag[i];
    fill_and_encode(ec, f, LEN);
    memcpy(copy, frag, sizeof(copy));
    /* data 1 and the two parity fragments, given backwards; data 1 is
     * decoded into its own buffer, 0 and 2 into theirs (lost: wiped). */
    memset(frag[0], 0, LEN);
    memset(frag[2], 0, LEN);
    unsigned idx[K] = {4, 3, 1};
    const unsigned char *have[K] = {frag[4], frag[3], frag[1]};
    unsigned char *out[K] = {frag[0], frag[1], frag[2]};
    assert_int_equal(agg_ec_decode(ec, LEN, idx, have, out), STRATA_OK);
    for (int j = 0; j < K; j++)
        assert_memory_equal(frag[j], copy[j], LEN);
    /* only data 2 wanted, from parity alone and data 0 */
    memset(frag[2], 0, LEN);
    unsigned idx2[K] = {3, 0, 4};
    const unsigned char *have2[K] = {frag[3], frag[0], frag[4]};
    unsigned char *one[K] = {NULL, NULL, frag[2]};
    assert_int_equal(agg_ec_decode(ec, LEN, idx2, have2, one), STRATA_OK);
    assert_memory_equal(frag[2], copy[2], LEN);
    agg_ec_destroy(ec);
}

/* Parity built share by share, in any order, equals the whole encode. */
static void update_by_shares(void **state)
{
    (void)state;
    enum { K = 4, M = 2, LEN = 1000 };
    agg_ec_t *ec;
    assert_int_equal(agg_ec_create(K, M, &ec), STRATA_OK);
    unsigned char frag[K + M][LEN], acc[M][LEN];
    unsigned char *f[K + M];
    for (int i = 0; i < K + M; i++)
        f[i] = frag[i];
    fill_and_encode(ec, f, LEN);
    memset(acc, 0, sizeof(acc));
    const unsigned order[K] = {2, 0, 3, 1};
    for (int i = 0; i < K; i++)
        for (unsigned j = 0; j < M; j++)
            agg_ec_encode_update(ec, LEN, order[i], j, frag[order[i]], acc[j]);
    assert_memory_equal(acc[0], frag[K], LEN);
    assert_memory_equal(acc[1], frag[K + 1], LEN);
    agg_ec_destroy(ec);
}

static void bad_arguments(void **state)
{
    (void)state;
    agg_ec_t *ec;
    assert_int_equal(agg_ec_create(0, 2, &ec), STRATA_ERR_INVALID);
    assert_int_equal(agg_ec_create(200, 56, &ec), STRATA_ERR_INVALID);
    assert_int_equal(agg_ec_create(2, 1, &ec), STRATA_OK);
    unsigned char a[8] = {0}, b[8] = {0}, o0[8], o1[8];
    const unsigned char *have[2] = {a, b};
    unsigned char *out[2] = {o0, o1};
    unsigned twice[2] = {1, 1}, range[2] = {0, 3};
    assert_int_equal(agg_ec_decode(ec, 8, twice, have, out),
                     STRATA_ERR_INVALID);
    assert_int_equal(agg_ec_decode(ec, 8, range, have, out),
                     STRATA_ERR_INVALID);
    agg_ec_destroy(ec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_subset_decodes),
        cmocka_unit_test(order_and_aliasing),
        cmocka_unit_test(update_by_shares),
        cmocka_unit_test(bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
