/* Helpers shared by the agg unit tests: test data with the awkward values
 * (denormals, NaN, Inf, ties, overflow) and element comparison. */
#ifndef STRATA_TESTS_AGG_TEST_H
#define STRATA_TESTS_AGG_TEST_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "agg/agg.h"
#include "agg/convert.h"

static inline uint64_t test_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A value of the kind that breaks kernels: mostly ordinary, sometimes a
 * denormal, a NaN, an infinity, a zero, or a value near the type's limit
 * (so that sums overflow in fp16). */
static inline double test_value(uint64_t *s, strata_dtype_t dtype)
{
    uint64_t r = test_rand(s);
    double u = (double)(r >> 11) * 0x1p-53 * 2.0 - 1.0;
    switch (r % 64) {
    case 0:
        return NAN;
    case 1:
        return r & 64 ? INFINITY : -INFINITY;
    case 2:
        return r & 64 ? 0.0 : -0.0;
    case 3: /* denormal of the element type */
        return u * (dtype == STRATA_FP16   ? 0x1p-15
                    : dtype == STRATA_FP64 ? 0x1p-1023
                                           : 0x1p-127);
    case 4: /* near the top of the range */
        return u * (dtype == STRATA_FP16   ? 65000.0
                    : dtype == STRATA_FP64 ? 1e307
                                           : 3e38);
    default:
        return u * (double)(1u << (r % 16));
    }
}

static inline void test_store(strata_dtype_t dtype, void *buf, size_t i,
                              double v)
{
    switch (dtype) {
    case STRATA_FP32:
        ((float *)buf)[i] = (float)v;
        break;
    case STRATA_FP64:
        ((double *)buf)[i] = v;
        break;
    case STRATA_FP16:
        ((uint16_t *)buf)[i] = agg_f32_to_f16((float)v);
        break;
    case STRATA_BF16:
        ((uint16_t *)buf)[i] = agg_f32_to_bf16((float)v);
        break;
    }
}

static inline void test_fill(strata_dtype_t dtype, void *buf, size_t count,
                             uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < count; i++)
        test_store(dtype, buf, i, test_value(&s, dtype));
}

static inline bool test_is_nan(strata_dtype_t dtype, const void *p)
{
    switch (dtype) {
    case STRATA_FP32:
        return isnan(*(const float *)p);
    case STRATA_FP64:
        return isnan(*(const double *)p);
    case STRATA_FP16:
        return (*(const uint16_t *)p & 0x7fff) > 0x7c00;
    case STRATA_BF16:
        return (*(const uint16_t *)p & 0x7fff) > 0x7f80;
    }
    return false;
}

/* Index of the first element whose bits differ (a NaN matches any NaN:
 * IEEE leaves payloads open), or count. */
static inline size_t test_first_diff(strata_dtype_t dtype, const void *a,
                                     const void *b, size_t count)
{
    size_t es = strata_dtype_size(dtype);
    for (size_t i = 0; i < count; i++) {
        const char *x = (const char *)a + i * es, *y = (const char *)b + i * es;
        if (memcmp(x, y, es) != 0 &&
            !(test_is_nan(dtype, x) && test_is_nan(dtype, y)))
            return i;
    }
    return count;
}

static inline double test_get(strata_dtype_t dtype, const void *buf, size_t i)
{
    switch (dtype) {
    case STRATA_FP32:
        return ((const float *)buf)[i];
    case STRATA_FP64:
        return ((const double *)buf)[i];
    case STRATA_FP16:
        return agg_f16_to_f32(((const uint16_t *)buf)[i]);
    case STRATA_BF16:
        return agg_bf16_to_f32(((const uint16_t *)buf)[i]);
    }
    return 0;
}

#endif /* STRATA_TESTS_AGG_TEST_H */
