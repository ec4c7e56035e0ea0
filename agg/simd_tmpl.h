/*
 * The bodies of the SIMD kernels, written once for every instruction set.
 * A kernel file defines, before including this header:
 *   agg_vf, agg_vd             vectors of fp32 and fp64, AGG_WF, AGG_WD lanes
 *   AGG_UNROLL                 vectors per source per step of a reduction
 *   agg_vf_set1/add/sub/mul, agg_vd_set1/add/mul
 *   for each element kind K of f32, f64, f16, bf16 (element type E):
 *     K##_load(const E *)               -> agg_vf (agg_vd for f64)
 *     K##_store(E *, v), K##_stream(E *, v)   (stream: aligned, non-temporal)
 * and then instantiates the kernels with the macros below.
 *
 * Operations happen in exactly the order of the scalar reference
 * (kernels_scalar.c), and the files are compiled without contraction, so
 * the results are bit-identical. Heads (until a streamed destination is
 * 64-byte aligned) and tails (less than a vector) go to the scalar kernels.
 */
#ifndef STRATA_AGG_SIMD_TMPL_H
#define STRATA_AGG_SIMD_TMPL_H

#include <immintrin.h>
#include <stdint.h>

#include "agg/agg.h"

/* Vectors per source per step (AGG_UNROLL, set by the kernel file): 256
 * bytes, four cache lines of each source in flight, and few enough that
 * every accumulator stays in a register. */
#define AGG_FOR_EACH_VECTOR(u)                                                 \
    _Pragma("GCC unroll 8") for (int u = 0; u < AGG_UNROLL; u++)

/* Elements before p reaches a 64-byte boundary (at most count). */
static inline size_t agg_head(const void *p, size_t esize, size_t count)
{
    size_t h = ((64 - ((uintptr_t)p & 63)) & 63) / esize;
    return h < count ? h : count;
}

/*
 * agg_reduce_K: dst = scale * sum, or dst + scale * sum, for elements E of
 * kind K accumulated in vectors V of W lanes (A: the scalar type of scale).
 */
#define AGG_SIMD_REDUCE(K, E, V, A, W, SET1, ADD, MUL, DTYPE)                  \
    static void agg_reduce_##K(void *dst, const void *const *srcs,             \
                               size_t nsrc, size_t off, size_t count,          \
                               double scale, unsigned flags)                   \
    {                                                                          \
        const E *p[STRATA_REDUCE_MAX_SOURCES];                                 \
        E *d = (E *)dst + off;                                                 \
        const bool acc = flags & AGG_REDUCE_ACC;                               \
        const bool stream = flags & AGG_REDUCE_STREAM;                         \
        const V s = SET1((A)scale);                                            \
        size_t i = stream ? agg_head(d, sizeof(E), count) : 0;                 \
        if (i)                                                                 \
            agg_ops_scalar.reduce[DTYPE](dst, srcs, nsrc, off, i, scale,       \
                                         flags);                               \
        for (size_t j = 0; j < nsrc; j++)                                      \
            p[j] = (const E *)srcs[j] + off;                                   \
        for (; count - i >= AGG_UNROLL * (W); i += AGG_UNROLL * (W)) {         \
            V a[AGG_UNROLL];                                                   \
            AGG_FOR_EACH_VECTOR(u)                                             \
            {                                                                  \
                a[u] = K##_load(p[0] + i + u * (W));                           \
            }                                                                  \
            for (size_t j = 1; j < nsrc; j++) {                                \
                const E *q = p[j] + i;                                         \
                AGG_FOR_EACH_VECTOR(u)                                         \
                {                                                              \
                    a[u] = ADD(a[u], K##_load(q + u * (W)));                   \
                }                                                              \
            }                                                                  \
            AGG_FOR_EACH_VECTOR(u)                                             \
            {                                                                  \
                a[u] = MUL(a[u], s);                                           \
                if (acc)                                                       \
                    a[u] = ADD(K##_load(d + i + u * (W)), a[u]);               \
                if (stream)                                                    \
                    K##_stream(d + i + u * (W), a[u]);                         \
                else                                                           \
                    K##_store(d + i + u * (W), a[u]);                          \
            }                                                                  \
        }                                                                      \
        for (; count - i >= (W); i += (W)) {                                   \
            V a = K##_load(p[0] + i);                                          \
            for (size_t j = 1; j < nsrc; j++)                                  \
                a = ADD(a, K##_load(p[j] + i));                                \
            a = MUL(a, s);                                                     \
            K##_store(d + i, acc ? ADD(K##_load(d + i), a) : a);               \
        }                                                                      \
        if (stream)                                                            \
            _mm_sfence(); /* streamed stores are weakly ordered */             \
        if (i < count)                                                         \
            agg_ops_scalar.reduce[DTYPE](dst, srcs, nsrc, off + i, count - i,  \
                                         scale, flags & ~AGG_REDUCE_STREAM);   \
    }

/* agg_axpy_K: y += alpha * x, x of kind K. */
#define AGG_SIMD_AXPY(K, E, DTYPE)                                             \
    static void agg_axpy_##K(float *y, const void *x, size_t count,            \
                             float alpha)                                      \
    {                                                                          \
        const E *px = x;                                                       \
        const agg_vf a = agg_vf_set1(alpha);                                   \
        size_t i = 0;                                                          \
        for (; count - i >= AGG_WF; i += AGG_WF)                               \
            f32_store(y + i, agg_vf_add(f32_load(y + i),                       \
                                        agg_vf_mul(a, K##_load(px + i))));     \
        agg_ops_scalar.axpy[DTYPE](y + i, px + i, count - i, alpha);           \
    }

/* agg_sgd_K: strata_sgd_update with the sum of gradients of kind K. */
#define AGG_SIMD_SGD(K, E, DTYPE)                                              \
    static void agg_sgd_##K(const strata_sgd_t *p, float *w, float *v,         \
                            const void *const *grads, size_t ngrads,           \
                            size_t off, size_t count)                          \
    {                                                                          \
        const E *g[STRATA_REDUCE_MAX_SOURCES];                                 \
        for (size_t j = 0; j < ngrads; j++)                                    \
            g[j] = (const E *)grads[j] + off;                                  \
        float *wo = w + off, *vo = v ? v + off : NULL;                         \
        const agg_vf gs = agg_vf_set1(p->grad_scale);                          \
        const agg_vf wd = agg_vf_set1(p->weight_decay);                        \
        const agg_vf mu = agg_vf_set1(p->momentum);                            \
        const agg_vf lr = agg_vf_set1(p->lr);                                  \
        const bool mom = p->momentum != 0.0f, nesterov = p->nesterov;          \
        size_t i = 0;                                                          \
        for (; count - i >= AGG_WF; i += AGG_WF) {                             \
            agg_vf si = K##_load(g[0] + i);                                    \
            for (size_t j = 1; j < ngrads; j++)                                \
                si = agg_vf_add(si, K##_load(g[j] + i));                       \
            agg_vf wi = f32_load(wo + i);                                      \
            agg_vf gi = agg_vf_add(agg_vf_mul(gs, si), agg_vf_mul(wd, wi));    \
            agg_vf di = gi;                                                    \
            if (mom) {                                                         \
                agg_vf m = agg_vf_add(agg_vf_mul(mu, f32_load(vo + i)), gi);   \
                f32_store(vo + i, m);                                          \
                di = nesterov ? agg_vf_add(gi, agg_vf_mul(mu, m)) : m;         \
            }                                                                  \
            f32_store(wo + i, agg_vf_sub(wi, agg_vf_mul(lr, di)));             \
        }                                                                      \
        if (i < count)                                                         \
            agg_ops_scalar.sgd[DTYPE](p, w, v, grads, ngrads, off + i,         \
                                      count - i);                              \
    }

/* The four reductions, axpy and SGD of one instruction set. */
#define AGG_SIMD_KERNELS()                                                     \
    AGG_SIMD_REDUCE(f32, float, agg_vf, float, AGG_WF, agg_vf_set1,            \
                    agg_vf_add, agg_vf_mul, STRATA_FP32)                       \
    AGG_SIMD_REDUCE(f64, double, agg_vd, double, AGG_WD, agg_vd_set1,          \
                    agg_vd_add, agg_vd_mul, STRATA_FP64)                       \
    AGG_SIMD_REDUCE(f16, uint16_t, agg_vf, float, AGG_WF, agg_vf_set1,         \
                    agg_vf_add, agg_vf_mul, STRATA_FP16)                       \
    AGG_SIMD_AXPY(f32, float, STRATA_FP32)                                     \
    AGG_SIMD_AXPY(f16, uint16_t, STRATA_FP16)                                  \
    AGG_SIMD_AXPY(bf16, uint16_t, STRATA_BF16)                                 \
    AGG_SIMD_SGD(f32, float, STRATA_FP32)                                      \
    AGG_SIMD_SGD(f16, uint16_t, STRATA_FP16)                                   \
    AGG_SIMD_SGD(bf16, uint16_t, STRATA_BF16)

#define AGG_BF16_REDUCE()                                                      \
    AGG_SIMD_REDUCE(bf16, uint16_t, agg_vf, float, AGG_WF, agg_vf_set1,        \
                    agg_vf_add, agg_vf_mul, STRATA_BF16)

#endif /* STRATA_AGG_SIMD_TMPL_H */
