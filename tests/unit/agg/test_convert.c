/* The scalar conversions against independent oracles built from the
 * definitions of the formats (ldexp and a search for the nearest value). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "agg_test.h"

/* The value an fp16 encodes, from the definition of binary16. */
static double f16_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return h & 0x8000 ? -v : v;
}

static void f16_to_f32_exhaustive(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = agg_f16_to_f32((uint16_t)h);
        if (((h >> 10) & 0x1f) == 0x1f) {
            if (h & 0x3ff) {
                assert_true(isnan(f));
                /* quiet, with the payload's top bits kept */
                assert_int_equal(agg_f32_bits(f) & 0x7fffff,
                                 (h & 0x3ff) << 13 | 0x400000);
            } else {
                assert_true(isinf(f) && (f < 0) == !!(h & 0x8000));
            }
            continue;
        }
        if ((double)f != f16_value((uint16_t)h) ||
            !!signbit(f) != !!(h & 0x8000))
            fail_msg("fp16 %04x -> %a, expected %a", h, (double)f,
                     f16_value((uint16_t)h));
    }
}

/* Round to nearest, ties to even, by searching the ordered magnitudes. */
static uint16_t f16_nearest(float f)
{
    double a = fabs((double)f);
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (isnan(f))
        return 0xffff; /* checked separately */
    if (a >= 65520.0)  /* halfway to 2^16 and above: Inf */
        return sign | 0x7c00;
    uint32_t lo = 0, hi = 0x7bff; /* f16_value(lo) <= a < f16_value(hi+1) */
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (f16_value((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo == 0x7bff)
        return sign | 0x7bff;
    double dlo = a - f16_value((uint16_t)lo),
           dhi = f16_value((uint16_t)(lo + 1)) - a;
    uint32_t r = dlo < dhi ? lo : dhi < dlo ? lo + 1 : (lo & 1 ? lo + 1 : lo);
    return sign | (uint16_t)r;
}

static void check_f16(uint32_t bits)
{
    float f = agg_bits_f32(bits);
    uint16_t h = agg_f32_to_f16(f);
    if (isnan(f)) {
        assert_int_equal(h,
                         (bits >> 16 & 0x8000) | 0x7e00 | (bits >> 13 & 0x3ff));
        return;
    }
    if (h != f16_nearest(f))
        fail_msg("fp32 %08x (%a) -> fp16 %04x, expected %04x", bits, (double)f,
                 h, f16_nearest(f));
}

static void f32_to_f16_rounding(void **state)
{
    (void)state;
    /* Every fp16 value, the midpoints to its neighbour (ties) and one fp32
     * ulp either side of them: where rounding goes wrong. */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        for (uint32_t s = 0; s < 2; s++) {
            double lo = f16_value((uint16_t)h),
                   hi = h < 0x7bff ? f16_value((uint16_t)(h + 1)) : 65536.0;
            uint32_t mid = agg_f32_bits((float)((lo + hi) / 2));
            for (uint32_t b = mid - 1; b <= mid + 1; b++)
                check_f16(b | s << 31);
            check_f16(agg_f32_bits((float)lo) | s << 31);
        }
    }
    /* And a stride through all of fp32, NaNs, infinities and denormals
     * included. */
    for (uint64_t b = 0; b < 1ull << 32; b += 65537)
        check_f16((uint32_t)b);
    check_f16(0x7f800000);
    check_f16(0xff800000);
    check_f16(0x7f800001);
    check_f16(0xffc00000);
}

static void bf16_conversions(void **state)
{
    (void)state;
    for (uint32_t b = 0; b < 65536; b++)
        assert_int_equal(agg_f32_bits(agg_bf16_to_f32((uint16_t)b)), b << 16);
    uint64_t s = 1;
    for (int i = 0; i < 1 << 20; i++) {
        uint32_t x = (uint32_t)test_rand(&s);
        if (i & 1) /* half the draws on a tie */
            x = (x & 0xffff0000u) | 0x8000;
        float f = agg_bits_f32(x);
        uint16_t r = agg_f32_to_bf16(f);
        if (isnan(f)) {
            assert_int_equal(r, (x >> 16) | 0x40);
            continue;
        }
        /* The two candidates, as doubles, with ties to the even one. */
        double v = (double)f, lo = agg_bf16_to_f32((uint16_t)(x >> 16));
        uint32_t up = (x >> 16) + 1;
        double hi = (up & 0x7fff) == 0x7f80
                        ? copysign(ldexp(1, 128), v)
                        : (double)agg_bf16_to_f32((uint16_t)up);
        double dlo = fabs(v - lo), dhi = fabs(hi - v);
        uint32_t want = dlo < dhi   ? x >> 16
                        : dhi < dlo ? up
                                    : ((x >> 16) & 1 ? up : x >> 16);
        if (r != want)
            fail_msg("fp32 %08x -> bf16 %04x, expected %04x", x, r, want);
    }
    /* Denormals are kept, overflow is Inf, NaN stays NaN. */
    assert_int_equal(agg_f32_to_bf16(agg_bits_f32(0x00018000)), 0x0002);
    assert_int_equal(agg_f32_to_bf16(agg_bits_f32(0x7f7fffff)), 0x7f80);
    assert_int_equal(agg_f32_to_bf16(agg_bits_f32(0x7f800001)), 0x7fc0);
    assert_int_equal(agg_f32_to_bf16(agg_bits_f32(0xff800001)), 0xffc0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(f16_to_f32_exhaustive),
        cmocka_unit_test(f32_to_f16_rounding),
        cmocka_unit_test(bf16_conversions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
