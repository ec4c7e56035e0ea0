/*
 * The bodies of the SIMD kernels, written once for every instruction set.
 * A kernel file defines, before including this header:
 *   agg_vf, agg_vd             vectors of fp32 and fp64, AGG_WF, AGG_WD lanes
 *   AGG_UNROLL, AGG_UNROLL16   vectors per source per step of a reduction of
 *                              32/64-bit and of 16-bit elements
 *   agg_vf_set1/add/sub/mul, agg_vd_set1/add/mul
 *   for each element kind K of f32, f64, f16, bf16 (element type E):
 *     K##_load(const E *)               -> agg_vf (agg_vd for f64)
 *     K##_store(E *, v), and but for bf16 K##_stream(E *, v) (aligned,
 *     non-temporal)
 *   for bf16 also bf16_load2, bf16_store2, bf16_stream2 (its pairs: bf16
 *   streams only in pairs; the others get theirs from AGG_SIMD_PAIR)
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

/* Vectors per source per step (U: AGG_UNROLL, or AGG_UNROLL16 for 16-bit
 * elements, set by the kernel file; even): 256 bytes of each source, four
 * cache lines in flight as the read-only roofline reads them, as far as every
 * accumulator fits in a register. A 16-bit load fills a vector from half as
 * many bytes, so it takes twice the vectors where the registers allow. */
#define AGG_FOR_EACH_PAIR(u, U)                                                \
    _Pragma("GCC unroll 16") for (int u = 0; u < (U); u += 2)

/* A step handles its vectors in pairs, 2W elements at a time: K##_load2
 * fills two vectors from them in whatever lane order suits the kind, and
 * K##_store2/K##_stream2 put them back in the same order (every lane is
 * summed alone, so the order changes no result). bf16 takes the even and the
 * odd elements, a shift and a mask, where widening each half takes a
 * shuffle; the other kinds take two plain vectors (AGG_SIMD_PAIR). */
#define AGG_SIMD_PAIR(K, E, V, W)                                              \
    static inline void K##_load2(const E *p, V *x_out, V *y_out)               \
    {                                                                          \
        *x_out = K##_load(p);                                                  \
        *y_out = K##_load(p + (W));                                            \
    }                                                                          \
    static inline void K##_store2(E *p, V x, V y)                              \
    {                                                                          \
        K##_store(p, x);                                                       \
        K##_store(p + (W), y);                                                 \
    }                                                                          \
    static inline void K##_stream2(E *p, V x, V y)                             \
    {                                                                          \
        K##_stream(p, x);                                                      \
        K##_stream(p + (W), y);                                                \
    }

/* Bytes ahead of the current step at which 16-bit reductions prefetch each
 * source. Their conversions keep the core busy long enough per byte that the
 * hardware prefetcher alone let memory and work take turns (1.25-1.3x the
 * read-only kernel's time on 8 sources of 64 MiB); fp32 and fp64 keep up
 * without (PF 0 below). */
#define AGG_PREFETCH16 1024

/* Prefetches the len bytes at p + ahead, a cache line at a time. */
static inline void agg_prefetch(const void *p, size_t ahead, size_t len)
{
    for (size_t l = 0; ahead && l < len; l += 64)
        _mm_prefetch((const char *)p + ahead + l, _MM_HINT_T0);
}

/* Elements before p reaches a 64-byte boundary (at most count). */
static inline size_t agg_head(const void *p, size_t esize, size_t count)
{
    size_t h = ((64 - ((uintptr_t)p & 63)) & 63) / esize;
    return h < count ? h : count;
}

/*
 * agg_reduce_K: dst = scale * sum, or dst + scale * sum, for elements E of
 * kind K accumulated in vectors V of W lanes (A: the scalar type of scale),
 * U vectors of each source a step, prefetched PF bytes ahead (0: not).
 * Every source is summed in fp32 (fp64) before the one conversion back.
 */
#define AGG_SIMD_REDUCE(K, E, V, A, W, U, PF, SET1, ADD, MUL, DTYPE)           \
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
        for (; count - i >= (U) * (W); i += (U) * (W)) {                       \
            V a[U];                                                            \
            agg_prefetch(p[0] + i, (PF), (U) * (W) * sizeof(E));               \
            AGG_FOR_EACH_PAIR(u, U)                                            \
            {                                                                  \
                K##_load2(p[0] + i + u * (W), &a[u], &a[u + 1]);               \
            }                                                                  \
            for (size_t j = 1; j < nsrc; j++) {                                \
                const E *q = p[j] + i;                                         \
                agg_prefetch(q, (PF), (U) * (W) * sizeof(E));                  \
                AGG_FOR_EACH_PAIR(u, U)                                        \
                {                                                              \
                    V x, y;                                                    \
                    K##_load2(q + u * (W), &x, &y);                            \
                    a[u] = ADD(a[u], x);                                       \
                    a[u + 1] = ADD(a[u + 1], y);                               \
                }                                                              \
            }                                                                  \
            AGG_FOR_EACH_PAIR(u, U)                                            \
            {                                                                  \
                V x = MUL(a[u], s), y = MUL(a[u + 1], s);                      \
                if (acc) {                                                     \
                    V dx, dy;                                                  \
                    K##_load2(d + i + u * (W), &dx, &dy);                      \
                    x = ADD(dx, x);                                            \
                    y = ADD(dy, y);                                            \
                }                                                              \
                if (stream)                                                    \
                    K##_stream2(d + i + u * (W), x, y);                        \
                else                                                           \
                    K##_store2(d + i + u * (W), x, y);                         \
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
    AGG_SIMD_PAIR(f32, float, agg_vf, AGG_WF)                                  \
    AGG_SIMD_PAIR(f64, double, agg_vd, AGG_WD)                                 \
    AGG_SIMD_PAIR(f16, uint16_t, agg_vf, AGG_WF)                               \
    AGG_SIMD_REDUCE(f32, float, agg_vf, float, AGG_WF, AGG_UNROLL, 0,          \
                    agg_vf_set1, agg_vf_add, agg_vf_mul, STRATA_FP32)          \
    AGG_SIMD_REDUCE(f64, double, agg_vd, double, AGG_WD, AGG_UNROLL, 0,        \
                    agg_vd_set1, agg_vd_add, agg_vd_mul, STRATA_FP64)          \
    AGG_SIMD_REDUCE(f16, uint16_t, agg_vf, float, AGG_WF, AGG_UNROLL16,        \
                    AGG_PREFETCH16, agg_vf_set1, agg_vf_add, agg_vf_mul,       \
                    STRATA_FP16)                                               \
    AGG_SIMD_AXPY(f32, float, STRATA_FP32)                                     \
    AGG_SIMD_AXPY(f16, uint16_t, STRATA_FP16)                                  \
    AGG_SIMD_AXPY(bf16, uint16_t, STRATA_BF16)                                 \
    AGG_SIMD_SGD(f32, float, STRATA_FP32)                                      \
    AGG_SIMD_SGD(f16, uint16_t, STRATA_FP16)                                   \
    AGG_SIMD_SGD(bf16, uint16_t, STRATA_BF16)

#define AGG_BF16_REDUCE()                                                      \
    AGG_SIMD_REDUCE(bf16, uint16_t, agg_vf, float, AGG_WF, AGG_UNROLL16,       \
                    AGG_PREFETCH16, agg_vf_set1, agg_vf_add, agg_vf_mul,       \
                    STRATA_BF16)

#endif /* STRATA_AGG_SIMD_TMPL_H */
