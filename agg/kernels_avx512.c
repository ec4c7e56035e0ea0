/* AVX-512 F/BW/VL kernels, and the table that adds the AVX512_BF16
 * conversion where the CPU has it. Compiled without FMA contraction. */
#include "agg/simd_avx512.h"

static inline void bf16_store(uint16_t *p, agg_vf v)
{
    _mm256_storeu_si256((__m256i *)p, bf16_round_int(v));
}
static inline void bf16_store2(uint16_t *p, agg_vf even, agg_vf odd)
{
    _mm512_storeu_si512(p, bf16_round2_int(even, odd));
}
static inline void bf16_stream2(uint16_t *p, agg_vf even, agg_vf odd)
{
    _mm512_stream_si512((__m512i *)p, bf16_round2_int(even, odd));
}

AGG_SIMD_KERNELS()
AGG_BF16_REDUCE()

#define AGG_AVX512_TABLE(table_name, features, bf16_reduce)                    \
    {                                                                          \
        .isa = AGG_ISA_AVX512, .name = table_name, .requires = features,       \
        .reduce = {[STRATA_FP32] = agg_reduce_f32,                             \
                   [STRATA_FP64] = agg_reduce_f64,                             \
                   [STRATA_FP16] = agg_reduce_f16,                             \
                   [STRATA_BF16] = bf16_reduce},                               \
        .axpy = {[STRATA_FP32] = agg_axpy_f32,                                 \
                 [STRATA_FP16] = agg_axpy_f16,                                 \
                 [STRATA_BF16] = agg_axpy_bf16},                               \
        .sgd = {[STRATA_FP32] = agg_sgd_f32,                                   \
                [STRATA_FP16] = agg_sgd_f16,                                   \
                [STRATA_BF16] = agg_sgd_bf16},                                 \
    }

const agg_ops_t agg_ops_avx512 =
    AGG_AVX512_TABLE("avx512", AGG_CPU_AVX512, agg_reduce_bf16);
const agg_ops_t agg_ops_avx512_bf16 =
    AGG_AVX512_TABLE("avx512+bf16", AGG_CPU_AVX512 | AGG_CPU_AVX512_BF16,
                     agg_avx512bf16_reduce_bf16);
