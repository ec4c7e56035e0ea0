/*
 * Portable kernels: the reference the SIMD paths must match bit for bit.
 * Sources are summed a block at a time into an accumulator array, which
 * keeps the per-element order (src0, src1, ...) and lets the compiler
 * vectorise the plain loops.
 */
#include <stdint.h>

#include "agg/agg.h"
#include "agg/convert.h"

#define AGG_SCALAR_BLOCK 256

static inline float agg_load_f32(const void *p, size_t i)
{
    return ((const float *)p)[i];
}
static inline float agg_load_f16(const void *p, size_t i)
{
    return agg_f16_to_f32(((const uint16_t *)p)[i]);
}
static inline float agg_load_bf16(const void *p, size_t i)
{
    return agg_bf16_to_f32(((const uint16_t *)p)[i]);
}
static inline double agg_load_f64(const void *p, size_t i)
{
    return ((const double *)p)[i];
}
static inline void agg_store_f32(void *p, size_t i, float v)
{
    ((float *)p)[i] = v;
}
static inline void agg_store_f16(void *p, size_t i, float v)
{
    ((uint16_t *)p)[i] = agg_f32_to_f16(v);
}
static inline void agg_store_bf16(void *p, size_t i, float v)
{
    ((uint16_t *)p)[i] = agg_f32_to_bf16(v);
}
static inline void agg_store_f64(void *p, size_t i, double v)
{
    ((double *)p)[i] = v;
}

/* reduce for element type T accumulated in A: acc = src0 + src1 + ...;
 * dst = acc * scale, or dst + acc * scale. */
#define AGG_SCALAR_REDUCE(name, A, LOAD, STORE)                                \
    static void name(void *dst, const void *const *srcs, size_t nsrc,          \
                     size_t off, size_t count, double scale, unsigned flags)   \
    {                                                                          \
        const A s = (A)scale;                                                  \
        A acc[AGG_SCALAR_BLOCK];                                               \
        for (size_t b = off; b < off + count; b += AGG_SCALAR_BLOCK) {         \
            size_t n = off + count - b;                                        \
            n = n < AGG_SCALAR_BLOCK ? n : AGG_SCALAR_BLOCK;                   \
            for (size_t k = 0; k < n; k++)                                     \
                acc[k] = LOAD(srcs[0], b + k);                                 \
            for (size_t j = 1; j < nsrc; j++)                                  \
                for (size_t k = 0; k < n; k++)                                 \
                    acc[k] += LOAD(srcs[j], b + k);                            \
            if (flags & AGG_REDUCE_ACC)                                        \
                for (size_t k = 0; k < n; k++)                                 \
                    STORE(dst, b + k, LOAD(dst, b + k) + acc[k] * s);          \
            else                                                               \
                for (size_t k = 0; k < n; k++)                                 \
                    STORE(dst, b + k, acc[k] * s);                             \
        }                                                                      \
    }

AGG_SCALAR_REDUCE(agg_scalar_reduce_f32, float, agg_load_f32, agg_store_f32)
AGG_SCALAR_REDUCE(agg_scalar_reduce_f64, double, agg_load_f64, agg_store_f64)
AGG_SCALAR_REDUCE(agg_scalar_reduce_f16, float, agg_load_f16, agg_store_f16)
AGG_SCALAR_REDUCE(agg_scalar_reduce_bf16, float, agg_load_bf16, agg_store_bf16)

#define AGG_SCALAR_AXPY(name, LOAD)                                            \
    static void name(float *y, const void *x, size_t count, float alpha)       \
    {                                                                          \
        for (size_t i = 0; i < count; i++)                                     \
            y[i] += alpha * LOAD(x, i);                                        \
    }

AGG_SCALAR_AXPY(agg_scalar_axpy_f32, agg_load_f32)
AGG_SCALAR_AXPY(agg_scalar_axpy_f16, agg_load_f16)
AGG_SCALAR_AXPY(agg_scalar_axpy_bf16, agg_load_bf16)

/* The order of operations is part of the contract (see strata_sgd_update):
 * each SIMD path performs the same roundings. */
#define AGG_SCALAR_SGD(name, LOAD)                                             \
    static void name(const strata_sgd_t *p, float *w, float *v,                \
                     const void *const *grads, size_t ngrads, size_t off,      \
                     size_t count)                                             \
    {                                                                          \
        for (size_t i = off; i < off + count; i++) {                           \
            float s = LOAD(grads[0], i);                                       \
            for (size_t j = 1; j < ngrads; j++)                                \
                s += LOAD(grads[j], i);                                        \
            float g = p->grad_scale * s + p->weight_decay * w[i];              \
            float d = g;                                                       \
            if (p->momentum != 0.0f) {                                         \
                float m = p->momentum * v[i] + g;                              \
                v[i] = m;                                                      \
                d = p->nesterov ? g + p->momentum * m : m;                     \
            }                                                                  \
            w[i] = w[i] - p->lr * d;                                           \
        }                                                                      \
    }

AGG_SCALAR_SGD(agg_scalar_sgd_f32, agg_load_f32)
AGG_SCALAR_SGD(agg_scalar_sgd_f16, agg_load_f16)
AGG_SCALAR_SGD(agg_scalar_sgd_bf16, agg_load_bf16)

const agg_ops_t agg_ops_scalar = {
    .isa = AGG_ISA_SCALAR,
    .name = "scalar",
    .requires = 0,
    .reduce = {[STRATA_FP32] = agg_scalar_reduce_f32,
               [STRATA_FP64] = agg_scalar_reduce_f64,
               [STRATA_FP16] = agg_scalar_reduce_f16,
               [STRATA_BF16] = agg_scalar_reduce_bf16},
    .axpy = {[STRATA_FP32] = agg_scalar_axpy_f32,
             [STRATA_FP16] = agg_scalar_axpy_f16,
             [STRATA_BF16] = agg_scalar_axpy_bf16},
    .sgd = {[STRATA_FP32] = agg_scalar_sgd_f32,
            [STRATA_FP16] = agg_scalar_sgd_f16,
            [STRATA_BF16] = agg_scalar_sgd_bf16},
};
