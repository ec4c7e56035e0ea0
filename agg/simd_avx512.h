/* Primitives of the AVX-512 (F/BW/VL) kernels, 16 fp32 lanes, shared by the
 * files with and without the AVX512_BF16 conversions. Included only by files
 * compiled for AVX-512 (without FMA contraction). */
#ifndef STRATA_AGG_SIMD_AVX512_H
#define STRATA_AGG_SIMD_AVX512_H

#include "agg/simd_tmpl.h"

typedef __m512 agg_vf;
typedef __m512d agg_vd;
#define AGG_WF 16
#define AGG_WD 8
#define AGG_UNROLL 4
#define AGG_UNROLL16 8

static inline agg_vf agg_vf_set1(float x)
{
    return _mm512_set1_ps(x);
}
static inline agg_vf agg_vf_add(agg_vf a, agg_vf b)
{
    return _mm512_add_ps(a, b);
}
static inline agg_vf agg_vf_sub(agg_vf a, agg_vf b)
{
    return _mm512_sub_ps(a, b);
}
static inline agg_vf agg_vf_mul(agg_vf a, agg_vf b)
{
    return _mm512_mul_ps(a, b);
}
static inline agg_vd agg_vd_set1(double x)
{
    return _mm512_set1_pd(x);
}
static inline agg_vd agg_vd_add(agg_vd a, agg_vd b)
{
    return _mm512_add_pd(a, b);
}
static inline agg_vd agg_vd_mul(agg_vd a, agg_vd b)
{
    return _mm512_mul_pd(a, b);
}

static inline agg_vf f32_load(const float *p)
{
    return _mm512_loadu_ps(p);
}
static inline void f32_store(float *p, agg_vf v)
{
    _mm512_storeu_ps(p, v);
}
static inline void f32_stream(float *p, agg_vf v)
{
    _mm512_stream_ps(p, v);
}

static inline agg_vd f64_load(const double *p)
{
    return _mm512_loadu_pd(p);
}
static inline void f64_store(double *p, agg_vd v)
{
    _mm512_storeu_pd(p, v);
}
static inline void f64_stream(double *p, agg_vd v)
{
    _mm512_stream_pd(p, v);
}

static inline agg_vf f16_load(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline __m256i f16_round(agg_vf v)
{
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline void f16_store(uint16_t *p, agg_vf v)
{
    _mm256_storeu_si256((__m256i *)p, f16_round(v));
}
static inline void f16_stream(uint16_t *p, agg_vf v)
{
    _mm256_stream_si256((__m256i *)p, f16_round(v));
}

static inline agg_vf bf16_load(const uint16_t *p)
{
    __m512i x = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
}
/* As agg_f32_to_bf16 (add 0x7fff plus the lowest kept bit, a NaN made quiet
 * instead), the result in the high half of each lane, the low half 0. */
static inline __m512i bf16_round_high(agg_vf v)
{
    __m512i x = _mm512_castps_si512(v);
    __m512i lsb =
        _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r =
        _mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, x, _mm512_set1_epi32(0x400000));
    return _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000));
}
static inline __m256i bf16_round_int(agg_vf v)
{
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(bf16_round_high(v), 16));
}

/* Pairs (simd_tmpl.h): the even elements of 32 in one vector, the odd ones
 * in the other, each where an fp32 keeps its top half. */
static inline void bf16_load2(const uint16_t *p, agg_vf *even_out,
                              agg_vf *odd_out)
{
    __m512i x = _mm512_loadu_si512(p);
    *even_out = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    *odd_out = _mm512_castsi512_ps(
        _mm512_and_si512(x, _mm512_set1_epi32((int)0xffff0000)));
}
static inline __m512i bf16_round2_int(agg_vf even, agg_vf odd)
{
    return _mm512_or_si512(_mm512_srli_epi32(bf16_round_high(even), 16),
                           bf16_round_high(odd));
}

/* The bf16 reduction with the AVX512_BF16 conversion
 * (kernels_avx512_bf16.c). */
void agg_avx512bf16_reduce_bf16(void *dst, const void *const *srcs, size_t nsrc,
                                size_t off, size_t count, double scale,
                                unsigned flags);

#endif /* STRATA_AGG_SIMD_AVX512_H */
