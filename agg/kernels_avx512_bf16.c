/* The bf16 reduction with AVX512_BF16's VCVTNEPS2BF16. That instruction
 * rounds to nearest even and quiets NaNs as the scalar reference does, but
 * flushes denormal inputs to zero: vectors holding a denormal take the
 * integer rounding instead. Compiled with -mavx512bf16. */
#include "agg/simd_avx512.h"

static inline __m256i bf16_round(agg_vf v)
{
    __m512i x = _mm512_castps_si512(v);
    __mmask16 zero_exp =
        _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x7f800000));
    __mmask16 mant = _mm512_test_epi32_mask(x, _mm512_set1_epi32(0x007fffff));
    if (zero_exp & mant) /* a denormal */
        return bf16_round_int(v);
    return (__m256i)_mm512_cvtneps_pbh(v);
}
static inline void bf16_store(uint16_t *p, agg_vf v)
{
    _mm256_storeu_si256((__m256i *)p, bf16_round(v));
}
static inline void bf16_stream(uint16_t *p, agg_vf v)
{
    _mm256_stream_si256((__m256i *)p, bf16_round(v));
}

AGG_BF16_REDUCE()

void agg_avx512bf16_reduce_bf16(void *dst, const void *const *srcs, size_t nsrc,
                                size_t off, size_t count, double scale,
                                unsigned flags)
{
    agg_reduce_bf16(dst, srcs, nsrc, off, count, scale, flags);
}
