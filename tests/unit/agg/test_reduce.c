/* Reductions: the scalar reference against a naive oracle, every SIMD path
 * against the scalar reference, and the public entry points. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "agg_test.h"
#include "tests/support/test_log.h"
#include "util/log.h"

#define GUARD 64 /* bytes of canary on each side of a destination */
#define MAXN 4200

typedef struct bufs {
    unsigned char *src_mem[STRATA_REDUCE_MAX_SOURCES];
    const void *srcs[STRATA_REDUCE_MAX_SOURCES];
    unsigned char *dst_mem[2]; /* reference, candidate */
    void *dst[2];
} bufs_t;

static bufs_t B;

static int setup(void **state)
{
    (void)state;
    size_t bytes = MAXN * 8 + 2 * GUARD + 64;
    for (int j = 0; j < STRATA_REDUCE_MAX_SOURCES; j++)
        B.src_mem[j] = malloc(bytes);
    for (int k = 0; k < 2; k++)
        B.dst_mem[k] = malloc(bytes);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int j = 0; j < STRATA_REDUCE_MAX_SOURCES; j++)
        free(B.src_mem[j]);
    for (int k = 0; k < 2; k++)
        free(B.dst_mem[k]);
    return 0;
}

/* Sources and two identical destinations of count elements, each shifted by
 * a few elements from 64-byte alignment (shift < 0: a pattern per buffer),
 * with canaries around the destinations. */
static void prepare(strata_dtype_t dt, size_t nsrc, size_t count, int shift,
                    uint64_t seed)
{
    size_t es = strata_dtype_size(dt);
    for (size_t j = 0; j < nsrc; j++) {
        size_t sh = shift >= 0 ? (size_t)shift : (j * 3 + 1) % 7;
        void *p = B.src_mem[j] + GUARD + sh * es;
        test_fill(dt, p, count, seed * 131 + j);
        B.srcs[j] = p;
    }
    size_t sh = shift >= 0 ? (size_t)shift : 5;
    for (int k = 0; k < 2; k++) {
        memset(B.dst_mem[k], 0xa5, MAXN * 8 + 2 * GUARD + 64);
        B.dst[k] = B.dst_mem[k] + GUARD + sh * es;
        test_fill(dt, B.dst[k], count, seed * 7 + 99);
    }
}

static void check_canaries(strata_dtype_t dt, size_t count)
{
    size_t es = strata_dtype_size(dt);
    for (int k = 0; k < 2; k++) {
        unsigned char *lo = B.dst_mem[k],
                      *hi = (unsigned char *)B.dst[k] + count * es;
        for (unsigned char *p = lo; p < (unsigned char *)B.dst[k]; p++)
            if (*p != 0xa5)
                fail_msg("write before dst at %td",
                         p - (unsigned char *)B.dst[k]);
        for (unsigned char *p = hi; p < hi + GUARD; p++)
            if (*p != 0xa5)
                fail_msg("write after dst at +%td", p - hi);
    }
}

static void expect_same(strata_dtype_t dt, const char *what, size_t nsrc,
                        size_t count, unsigned flags, double scale)
{
    size_t i = test_first_diff(dt, B.dst[0], B.dst[1], count);
    if (i < count)
        fail_msg("%s %s nsrc %zu count %zu flags %u scale %g: element %zu "
                 "differs (%.9g vs %.9g)",
                 what, strata_dtype_name(dt), nsrc, count, flags, scale, i,
                 test_get(dt, B.dst[0], i), test_get(dt, B.dst[1], i));
    check_canaries(dt, count);
}

/* The oracle: one element at a time, straight from the contract. */
static void oracle(strata_dtype_t dt, void *dst, const void *const *srcs,
                   size_t nsrc, size_t count, double scale, bool acc)
{
    for (size_t i = 0; i < count; i++) {
        if (dt == STRATA_FP64) {
            double s = ((const double *)srcs[0])[i];
            for (size_t j = 1; j < nsrc; j++)
                s += ((const double *)srcs[j])[i];
            s *= scale;
            ((double *)dst)[i] = acc ? ((double *)dst)[i] + s : s;
            continue;
        }
        float s = (float)test_get(dt, srcs[0], i);
        for (size_t j = 1; j < nsrc; j++)
            s += (float)test_get(dt, srcs[j], i);
        s *= (float)scale;
        if (acc)
            s = (float)test_get(dt, dst, i) + s;
        test_store(dt, dst, i, s);
    }
}

static const size_t counts[] = {0,   1,   2,   3,   5,    7,    8,    15,  16,
                                17,  31,  32,  33,  63,   64,   65,   127, 128,
                                129, 255, 257, 511, 1000, 1023, 1025, 4099};
static const double scales[] = {1.0, 0.125, -1.0 / 3.0};

static void scalar_matches_oracle(void **state)
{
    (void)state;
    const agg_ops_t *ops = &agg_ops_scalar;
    for (int dt = 0; dt < AGG_NDTYPES; dt++)
        for (size_t n = 1; n <= 9; n += 4)
            for (size_t c = 0; c < sizeof(counts) / sizeof(*counts); c++)
                for (unsigned acc = 0; acc < 2; acc++) {
                    double sc = scales[c % 3];
                    prepare(dt, n, counts[c], -1, c * 5 + n);
                    oracle(dt, B.dst[0], B.srcs, n, counts[c], sc, acc);
                    ops->reduce[dt](B.dst[1], B.srcs, n, 0, counts[c], sc,
                                    acc ? AGG_REDUCE_ACC : 0);
                    expect_same(dt, "scalar vs oracle", n, counts[c], acc, sc);
                }
}

static void check_path(const agg_ops_t *ops, strata_dtype_t dt, size_t nsrc,
                       size_t count, int shift, unsigned flags, double scale,
                       uint64_t seed)
{
    prepare(dt, nsrc, count, shift, seed);
    agg_ops_scalar.reduce[dt](B.dst[0], B.srcs, nsrc, 0, count, scale,
                              flags & AGG_REDUCE_ACC);
    ops->reduce[dt](B.dst[1], B.srcs, nsrc, 0, count, scale, flags);
    expect_same(dt, ops->name, nsrc, count, flags, scale);
}

/* Every table this CPU runs, against the scalar reference: lengths around
 * every vector and unroll width, every number of sources, misaligned
 * buffers, plain and streaming stores. */
static void every_path_matches_scalar(void **state)
{
    (void)state;
    int tested = 0;
    for (size_t t = 0; t < agg_impl_count(); t++) {
        const agg_ops_t *ops = agg_impl(t);
        if (ops == &agg_ops_scalar || !agg_impl_supported(ops))
            continue;
        tested++;
        for (int dt = 0; dt < AGG_NDTYPES; dt++) {
            for (size_t c = 0; c < sizeof(counts) / sizeof(*counts); c++)
                for (unsigned f = 0; f < 4; f++)
                    check_path(ops, dt, 1 + c % 5, counts[c], (int)c % 4 - 1, f,
                               scales[(c + f) % 3], c * 4 + f);
            for (size_t n = 1; n <= STRATA_REDUCE_MAX_SOURCES; n++)
                check_path(ops, dt, n, 77 + n % 3, -1, (unsigned)n % 4,
                           scales[n % 3], n);
        }
    }
    print_message("%d SIMD tables tested (CPU: %s)\n", tested,
                  agg_cpu_features_text());
}

/* The offset argument (chunks of the pool) addresses the same elements. */
static void offset_addresses_a_sub_range(void **state)
{
    (void)state;
    for (size_t t = 0; t < agg_impl_count(); t++) {
        const agg_ops_t *ops = agg_impl(t);
        if (!agg_impl_supported(ops))
            continue;
        for (int dt = 0; dt < AGG_NDTYPES; dt++) {
            size_t count = 1000, off = 333, len = 401;
            prepare(dt, 3, count, -1, 5);
            agg_ops_scalar.reduce[dt](B.dst[0], B.srcs, 3, 0, count, 0.5, 0);
            memcpy(B.dst[1], B.dst[0], count * strata_dtype_size(dt));
            /* Redo the middle; the rest must be left alone. */
            size_t es = strata_dtype_size(dt);
            memset((char *)B.dst[1] + off * es, 0, len * es);
            ops->reduce[dt](B.dst[1], B.srcs, 3, off, len, 0.5,
                            AGG_REDUCE_STREAM);
            expect_same(dt, ops->name, 3, count, AGG_REDUCE_STREAM, 0.5);
        }
    }
}

/* Rounding of the 16-bit stores: every fp16/bf16 input, scaled so that the
 * fp32 results fall on ties, denormals and overflow. */
static void sixteen_bit_rounding_sweep(void **state)
{
    (void)state;
    static uint16_t in[65536], out[2][65536];
    const double sc[] = {1.0 + 0x1p-11, 1.0 + 0x1p-8, 1.0 - 0x1p-12,
                         3.0 + 0x1p-10, 0x1p-10,      0x1p-20,
                         65504.0,       1e-3,         -0.7};
    for (uint32_t i = 0; i < 65536; i++)
        in[i] = (uint16_t)i;
    const void *srcs[1] = {in};
    for (size_t t = 0; t < agg_impl_count(); t++) {
        const agg_ops_t *ops = agg_impl(t);
        if (!agg_impl_supported(ops))
            continue;
        for (int dt = STRATA_FP16; dt <= STRATA_BF16; dt++) {
            for (size_t s = 0; s < sizeof(sc) / sizeof(*sc); s++) {
                oracle(dt, out[0], srcs, 1, 65536, sc[s], false);
                ops->reduce[dt](out[1], srcs, 1, 0, 65536, sc[s], 0);
                size_t i = test_first_diff(dt, out[0], out[1], 65536);
                if (i < 65536)
                    fail_msg("%s %s scale %g input %04zx: %04x, expected "
                             "%04x",
                             ops->name, strata_dtype_name(dt), sc[s], i,
                             out[1][i], out[0][i]);
            }
        }
    }
}

/* ---- public API ---- */

static void public_calls_each_path(void **state)
{
    (void)state;
    const char *isas[] = {"scalar", "avx2", "avx512", "auto"};
    for (size_t i = 0; i < 4; i++) {
        if (!strata_simd_supported(isas[i]) && strcmp(isas[i], "auto"))
            continue;
        assert_int_equal(strata_simd_select(isas[i]), STRATA_OK);
        if (strcmp(isas[i], "auto"))
            assert_string_equal(strata_simd_name(), isas[i]);
        for (int dt = 0; dt < AGG_NDTYPES; dt++)
            for (unsigned acc = 0; acc < 2; acc++) {
                prepare(dt, 6, 1001, -1, i * 2 + acc);
                oracle(dt, B.dst[0], B.srcs, 6, 1001, 0.25, acc);
                assert_int_equal((acc ? strata_reduce_acc : strata_reduce)(
                                     dt, B.dst[1], B.srcs, 6, 1001, 0.25),
                                 STRATA_OK);
                expect_same(dt, isas[i], 6, 1001, acc, 0.25);
            }
    }
    assert_int_equal(strata_simd_select("auto"), STRATA_OK);
}

/* dst may be one of the sources. */
static void in_place(void **state)
{
    (void)state;
    for (int dt = 0; dt < AGG_NDTYPES; dt++)
        for (size_t which = 0; which < 5; which += 4) {
            prepare(dt, 5, 999, 0, which + 1);
            size_t bytes = 999 * strata_dtype_size(dt);
            memcpy(B.dst[1], B.srcs[which], bytes);
            oracle(dt, B.dst[0], B.srcs, 5, 999, 1.0, false);
            B.srcs[which] = B.dst[1];
            assert_int_equal(strata_reduce(dt, B.dst[1], B.srcs, 5, 999, 1.0),
                             STRATA_OK);
            expect_same(dt, "in place", 5, 999, 0, 1.0);
        }
}

/* Summing in fp16 pairwise would round 2048 + 1 back to 2048 twice. */
static void fp16_rounds_once(void **state)
{
    (void)state;
    uint16_t a = agg_f32_to_f16(2048.0f), b = agg_f32_to_f16(1.0f), d;
    const void *srcs[3] = {&a, &b, &b};
    assert_int_equal(strata_reduce(STRATA_FP16, &d, srcs, 3, 1, 1.0),
                     STRATA_OK);
    assert_true(agg_f16_to_f32(d) == 2050.0f);
    uint16_t big = agg_f32_to_f16(65504.0f);
    const void *two[2] = {&big, &big};
    assert_int_equal(strata_reduce(STRATA_FP16, &d, two, 2, 1, 1.0), STRATA_OK);
    assert_int_equal(d, 0x7c00); /* overflow is Inf */
    assert_int_equal(strata_reduce(STRATA_FP16, &d, two, 2, 1, 0.5), STRATA_OK);
    assert_int_equal(d, big); /* but not when the scaled sum fits */
    uint16_t bmax = 0x7f7f, bnan = 0x7fc1;
    const void *bf[2] = {&bmax, &bnan};
    assert_int_equal(strata_reduce(STRATA_BF16, &d, bf, 2, 1, 1.0), STRATA_OK);
    assert_true(test_is_nan(STRATA_BF16, &d));
}

static void bad_arguments(void **state)
{
    (void)state;
    float x = 1, y = 2;
    const void *srcs[STRATA_REDUCE_MAX_SOURCES + 1] = {&x, &x, NULL};
    test_log_start();
    struct {
        strata_status_t st;
        const char *want;
    } r[] = {
        {strata_reduce(STRATA_FP32, &y, srcs, 0, 1, 1.0), "0 sources"},
        {strata_reduce(STRATA_FP32, &y, srcs, 65, 1, 1.0), "65 sources"},
        {strata_reduce(STRATA_FP32, &y, srcs, 3, 1, 1.0), "source 2 of 3"},
        {strata_reduce(STRATA_FP32, NULL, srcs, 2, 1, 1.0), "dst is NULL"},
        {strata_reduce((strata_dtype_t)7, &y, srcs, 2, 1, 1.0), "dtype 7"},
        {strata_reduce_acc(STRATA_FP32, &y, srcs, 2, SIZE_MAX / 4, 1.0),
         "address space"},
        {strata_reduce_mt(NULL, STRATA_FP32, &y, NULL, 2, 1, 1.0),
         "srcs is NULL"},
    };
    for (size_t i = 0; i < sizeof(r) / sizeof(*r); i++) {
        assert_int_equal(r[i].st, STRATA_ERR_INVALID);
        if (!strstr(test_log.last_error, "agg: strata_reduce"))
            fail_msg("error '%s' does not name the function",
                     test_log.last_error);
    }
    assert_int_equal(test_log.errors, (int)(sizeof(r) / sizeof(*r)));
    /* Nothing to do is fine, whatever the pointers. */
    assert_int_equal(strata_reduce(STRATA_FP16, NULL, srcs, 2, 0, 1.0),
                     STRATA_OK);
    assert_true(y == 2.0f);
    test_log_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(scalar_matches_oracle),
        cmocka_unit_test(every_path_matches_scalar),
        cmocka_unit_test(offset_addresses_a_sub_range),
        cmocka_unit_test(sixteen_bit_rounding_sweep),
        cmocka_unit_test(public_calls_each_path),
        cmocka_unit_test(in_place),
        cmocka_unit_test(fp16_rounds_once),
        cmocka_unit_test(bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
