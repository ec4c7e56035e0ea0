/* AVX2 + F16C kernels (8 fp32 lanes). Compiled with -mavx2 -mf16c only:
 * no FMA, so that every product is rounded as in the scalar reference. */
#include "agg/simd_tmpl.h"

typedef __m256 agg_vf;
typedef __m256d agg_vd;
#define AGG_WF 8
#define AGG_WD 4
#define AGG_UNROLL 8
/* 128 bytes of a 16-bit source a step: 16 accumulators would not fit the
 * 16 registers. */
#define AGG_UNROLL16 8

static inline agg_vf agg_vf_set1(float x)
{
    return _mm256_set1_ps(x);
}
static inline agg_vf agg_vf_add(agg_vf a, agg_vf b)
{
    return _mm256_add_ps(a, b);
}
static inline agg_vf agg_vf_sub(agg_vf a, agg_vf b)
{
    return _mm256_sub_ps(a, b);
}
static inline agg_vf agg_vf_mul(agg_vf a, agg_vf b)
{
    return _mm256_mul_ps(a, b);
}
static inline agg_vd agg_vd_set1(double x)
{
    return _mm256_set1_pd(x);
}
static inline agg_vd agg_vd_add(agg_vd a, agg_vd b)
{
    return _mm256_add_pd(a, b);
}
static inline agg_vd agg_vd_mul(agg_vd a, agg_vd b)
{
    return _mm256_mul_pd(a, b);
}

static inline agg_vf f32_load(const float *p)
{
    return _mm256_loadu_ps(p);
}
static inline void f32_store(float *p, agg_vf v)
{
    _mm256_storeu_ps(p, v);
}
static inline void f32_stream(float *p, agg_vf v)
{
    _mm256_stream_ps(p, v);
}

static inline agg_vd f64_load(const double *p)
{
    return _mm256_loadu_pd(p);
}
static inline void f64_store(double *p, agg_vd v)
{
    _mm256_storeu_pd(p, v);
}
static inline void f64_stream(double *p, agg_vd v)
{
    _mm256_stream_pd(p, v);
}

static inline agg_vf f16_load(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline __m128i f16_round(agg_vf v)
{
    return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline void f16_store(uint16_t *p, agg_vf v)
{
    _mm_storeu_si128((__m128i *)p, f16_round(v));
}
static inline void f16_stream(uint16_t *p, agg_vf v)
{
    _mm_stream_si128((__m128i *)p, f16_round(v));
}

static inline agg_vf bf16_load(const uint16_t *p)
{
    __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
}
/* As agg_f32_to_bf16 (add 0x7fff plus the lowest kept bit, a NaN made quiet
 * instead), the result in the high half of each lane, the low half 0. */
static inline __m256i bf16_round_high(agg_vf v)
{
    __m256i x = _mm256_castps_si256(v);
    __m256i lsb =
        _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i r =
        _mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    __m256i quiet = _mm256_or_si256(x, _mm256_set1_epi32(0x400000));
    r = _mm256_blendv_epi8(r, quiet, nan);
    return _mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000));
}
static inline __m128i bf16_round(agg_vf v)
{
    __m256i r = _mm256_srli_epi32(bf16_round_high(v), 16);
    return _mm_packus_epi32(_mm256_castsi256_si128(r),
                            _mm256_extracti128_si256(r, 1));
}
static inline void bf16_store(uint16_t *p, agg_vf v)
{
    _mm_storeu_si128((__m128i *)p, bf16_round(v));
}

/* Pairs (simd_tmpl.h): the even elements of 16 in one vector, the odd ones
 * in the other, each where an fp32 keeps its top half. */
static inline void bf16_load2(const uint16_t *p, agg_vf *even_out,
                              agg_vf *odd_out)
{
    __m256i x = _mm256_loadu_si256((const __m256i *)p);
    *even_out = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    *odd_out = _mm256_castsi256_ps(
        _mm256_and_si256(x, _mm256_set1_epi32((int)0xffff0000)));
}
static inline __m256i bf16_round2(agg_vf even, agg_vf odd)
{
    return _mm256_or_si256(_mm256_srli_epi32(bf16_round_high(even), 16),
                           bf16_round_high(odd));
}
static inline void bf16_store2(uint16_t *p, agg_vf even, agg_vf odd)
{
    _mm256_storeu_si256((__m256i *)p, bf16_round2(even, odd));
}
static inline void bf16_stream2(uint16_t *p, agg_vf even, agg_vf odd)
{
    _mm256_stream_si256((__m256i *)p, bf16_round2(even, odd));
}

AGG_SIMD_KERNELS()
AGG_BF16_REDUCE()

const agg_ops_t agg_ops_avx2 = {
    .isa = AGG_ISA_AVX2,
    .name = "avx2",
    .requires = AGG_CPU_AVX2,
    .reduce = {[STRATA_FP32] = agg_reduce_f32,
               [STRATA_FP64] = agg_reduce_f64,
               [STRATA_FP16] = agg_reduce_f16,
               [STRATA_BF16] = agg_reduce_bf16},
    .axpy = {[STRATA_FP32] = agg_axpy_f32,
             [STRATA_FP16] = agg_axpy_f16,
             [STRATA_BF16] = agg_axpy_bf16},
    .sgd = {[STRATA_FP32] = agg_sgd_f32,
            [STRATA_FP16] = agg_sgd_f16,
            [STRATA_BF16] = agg_sgd_bf16},
};
