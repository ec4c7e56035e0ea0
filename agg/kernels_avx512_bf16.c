/* The bf16 reduction with AVX512_BF16's VCVTNEPS2BF16. That instruction
 * rounds to nearest even and quiets NaNs as the scalar reference does, but
 * flushes denormal inputs to zero: vectors holding a denormal take the
 * integer rounding instead. Compiled with -mavx512bf16. */
#include "agg/simd_avx512.h"

static inline bool bf16_has_denormal(agg_vf v)
{
    __m512i x = _mm512_castps_si512(v);
    __mmask16 zero_exp =
        _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x7f800000));
    __mmask16 mant = _mm512_test_epi32_mask(x, _mm512_set1_epi32(0x007fffff));
    return zero_exp & mant;
}
static inline __m256i bf16_round(agg_vf v)
{
    if (bf16_has_denormal(v))
        return bf16_round_int(v);
    return (__m256i)_mm512_cvtneps_pbh(v);
}
static inline void bf16_store(uint16_t *p, agg_vf v)
{
    _mm256_storeu_si256((__m256i *)p, bf16_round(v));
}

/* A pair (simd_avx512.h) converted at once: the even elements to the low
 * half, the odd ones to the high half, then interleaved. */
static inline __m512i bf16_round2(agg_vf even, agg_vf odd)
{
    if (bf16_has_denormal(even) || bf16_has_denormal(odd))
        return bf16_round2_int(even, odd);
    /* word 2k from word k, word 2k + 1 from word 16 + k */
    const __m512i interleave = _mm512_add_epi32(
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                             11, 12, 13, 14, 15),
                           _mm512_set1_epi32(0x10001)),
        _mm512_set1_epi32(16 << 16));
    return _mm512_permutexvar_epi16(interleave,
                                    (__m512i)_mm512_cvtne2ps_pbh(odd, even));
}
static inline void bf16_store2(uint16_t *p, agg_vf even, agg_vf odd)
{
    _mm512_storeu_si512(p, bf16_round2(even, odd));
}
static inline void bf16_stream2(uint16_t *p, agg_vf even, agg_vf odd)
{
    _mm512_stream_si512((__m512i *)p, bf16_round2(even, odd));
}

AGG_BF16_REDUCE()

void agg_avx512bf16_reduce_bf16(void *dst, const void *const *srcs, size_t nsrc,
                                size_t off, size_t count, double scale,
                                unsigned flags)
{
    agg_reduce_bf16(dst, srcs, nsrc, off, count, scale, flags);
}
