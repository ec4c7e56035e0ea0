/*
 * Scalar conversions between fp32 and the 16-bit types, with exactly the
 * results of the x86 instructions (F16C VCVTPH2PS/VCVTPS2PH with round to
 * nearest even; for bf16, VCVTNEPS2BF16 without its flush of denormals).
 * They define what every kernel computes: the SIMD paths are tested against
 * them. The fp16 rounding relies on the default rounding mode.
 */
#ifndef STRATA_AGG_CONVERT_H
#define STRATA_AGG_CONVERT_H

#include <stdint.h>
#include <string.h>

#include <strata/strata.h>

static inline uint32_t agg_f32_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    return x;
}

static inline float agg_bits_f32(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

/* Exact; a signalling NaN comes back quiet, as the hardware does. */
static inline float agg_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;

    if (exp == 0x1f)
        return agg_bits_f32(sign | 0x7f800000 | mant << 13 |
                            (mant ? 0x400000 : 0));
    if (exp != 0)
        return agg_bits_f32(sign | (exp + 112) << 23 | mant << 13);
    float f = (float)mant * 0x1p-24f; /* subnormal or zero: exact */
    return sign ? -f : f;
}

/* Round to nearest even; overflow gives Inf, a NaN stays a (quiet) NaN with
 * the top of its payload. */
static inline uint16_t agg_f32_to_f16(float f)
{
    uint32_t x = agg_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t a = x & 0x7fffffff;

    if (a > 0x7f800000)
        return sign | 0x7e00 | ((a >> 13) & 0x3ff);
    if (a >= 0x47800000) /* >= 2^16: Inf (65520..65536 round up below) */
        return sign | 0x7c00;
    if (a < 113u << 23) {
        /* fp16 subnormal or zero: adding 0.5 lines the 10 result bits up
         * at the bottom of the mantissa, and the FPU rounds to even. */
        uint32_t t = agg_f32_bits(agg_bits_f32(a) + 0.5f);
        return sign | (uint16_t)(t - (126u << 23));
    }
    /* Rebias the exponent and round the 13 dropped bits to even; a carry
     * out of the mantissa correctly bumps the exponent (up to Inf). */
    a += 0xc8000fffu + ((a >> 13) & 1);
    return sign | (uint16_t)(a >> 13);
}

static inline float agg_bf16_to_f32(uint16_t b)
{
    return agg_bits_f32((uint32_t)b << 16);
}

/* Round to nearest even, denormals kept; a NaN is made quiet. */
static inline uint16_t agg_f32_to_bf16(float f)
{
    uint32_t x = agg_f32_bits(f);

    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* src[i] of a 16-bit dtype (fp16 or bf16), widened to fp32. */
static inline float agg_widen16(strata_dtype_t dtype, const void *src, size_t i)
{
    const uint16_t *h = src;
    return dtype == STRATA_FP16 ? agg_f16_to_f32(h[i]) : agg_bf16_to_f32(h[i]);
}

/* dst[i] = v rounded to dtype (one of strata_dtype_t); returns what was
 * stored, widened back to fp32. */
static inline float agg_store_as(strata_dtype_t dtype, void *dst, size_t i,
                                 float v)
{
    uint16_t *h = dst;
    switch (dtype) {
    case STRATA_FP32:
        ((float *)dst)[i] = v;
        return v;
    case STRATA_FP64:
        ((double *)dst)[i] = (double)v;
        return v;
    case STRATA_FP16:
        h[i] = agg_f32_to_f16(v);
        return agg_f16_to_f32(h[i]);
    case STRATA_BF16:
        h[i] = agg_f32_to_bf16(v);
        return agg_bf16_to_f32(h[i]);
    }
    return v;
}

#endif /* STRATA_AGG_CONVERT_H */
