/*
 * Top-k sparsification for GDTopK: DGC's sampled threshold with its
 * refinement loop, error feedback, and the exact top-k.
 *
 * Magnitudes are compared as the bits of |x| (uint32): for non-negative
 * floats the integer order is the numeric order, and a NaN ranks above Inf,
 * so a NaN gradient is sent at once instead of hiding in the residual.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "agg/agg.h"
#include "agg/convert.h"
#include "util/alloc.h"
#include "util/log.h"

/* DGC's refinement constants (also the public DGC compressor's defaults). */
#define AGG_TOPK_UPPER 1.3
#define AGG_TOPK_LOWER 0.8
#define AGG_TOPK_SHRINK 0.8
#define AGG_TOPK_ITERS 10

struct strata_topk {
    size_t max_count;
    uint32_t *keys; /* max_count magnitudes: samples, then candidates */
    uint64_t rng;
};

static inline uint32_t agg_mag(float x)
{
    return agg_f32_bits(x) & 0x7fffffff;
}

/* splitmix64: a fast, well-mixed generator for the sample positions. */
static uint64_t agg_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) (Lemire's multiply-shift; the bias is below 2^-32). */
static size_t agg_rand_below(uint64_t *state, size_t n)
{
    return (size_t)(((unsigned __int128)agg_rand(state) * n) >> 64);
}

static inline void agg_swap(uint32_t *a, uint32_t *b)
{
    uint32_t t = *a;
    *a = *b;
    *b = t;
}

/* The k-th largest of keys[0..n) (1 <= k <= n); reorders keys.
 * Quickselect with random pivots and three-way partitioning, so that runs of
 * equal keys (zeros) cost linear time. */
static uint32_t agg_kth_largest(uint32_t *keys, size_t n, size_t k,
                                uint64_t *rng)
{
    size_t lo = 0, hi = n, want = k - 1; /* index in descending order */
    for (;;) {
        uint32_t pivot = keys[lo + agg_rand_below(rng, hi - lo)];
        /* [lo, gt) > pivot, [gt, i) == pivot, [lt, hi) < pivot */
        size_t gt = lo, i = lo, lt = hi;
        while (i < lt) {
            if (keys[i] > pivot)
                agg_swap(&keys[i++], &keys[gt++]);
            else if (keys[i] < pivot)
                agg_swap(&keys[i], &keys[--lt]);
            else
                i++;
        }
        if (want < gt)
            hi = gt;
        else if (want >= lt)
            lo = lt;
        else
            return pivot;
    }
}

static size_t agg_count_at_least(const float *x, size_t n, uint32_t thr)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += agg_mag(x[i]) >= thr;
    return c;
}

/* Writes the k elements of largest magnitude, ties to the lower index, in
 * index order; kth is the k-th largest magnitude. Zeroes them in residual
 * (x itself, or NULL). */
static size_t agg_emit_exact(const float *x, float *residual, size_t n,
                             size_t k, uint32_t kth, strata_sparse_t *out)
{
    size_t above = 0;
    for (size_t i = 0; i < n; i++)
        above += agg_mag(x[i]) > kth;
    size_t ties = k - above, m = 0;
    for (size_t i = 0; i < n && m < k; i++) {
        uint32_t mag = agg_mag(x[i]);
        if (mag > kth || (mag == kth && ties && ties--)) {
            out[m++] = (strata_sparse_t){(uint32_t)i, x[i]};
            if (residual)
                residual[i] = 0.0f;
        }
    }
    return m;
}

/* Writes the first k elements whose magnitude is at least thr, zeroing them
 * in x. */
static size_t agg_emit_first(float *x, size_t n, size_t k, uint32_t thr,
                             strata_sparse_t *out)
{
    size_t m = 0;
    for (size_t i = 0; i < n && m < k; i++) {
        if (agg_mag(x[i]) >= thr) {
            out[m++] = (strata_sparse_t){(uint32_t)i, x[i]};
            x[i] = 0.0f;
        }
    }
    return m;
}

/* Gathers the candidates' magnitudes and selects exactly among them. */
static size_t agg_emit_exact_among(strata_topk_t *tk, float *x, size_t n,
                                   size_t k, uint32_t thr, strata_sparse_t *out)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t mag = agg_mag(x[i]);
        if (mag >= thr)
            tk->keys[c++] = mag;
    }
    /* c >= k, so every element of the top k is a candidate. */
    uint32_t kth = agg_kth_largest(tk->keys, c, k, &tk->rng);
    return agg_emit_exact(x, x, n, k, kth, out);
}

/* 0.8 * thr as a magnitude key (a NaN key is treated as Inf). */
static uint32_t agg_shrink(uint32_t thr)
{
    if (thr > 0x7f800000u)
        thr = 0x7f800000u;
    return agg_mag((float)(AGG_TOPK_SHRINK * agg_bits_f32(thr)));
}

size_t strata_topk_k(size_t count, double ratio)
{
    if (count == 0)
        return 0;
    double k = ceil((double)count * ratio);
    if (!(k >= 1.0)) /* also catches NaN */
        return 1;
    return k >= (double)count ? count : (size_t)k;
}

strata_status_t strata_topk_create(size_t max_count, uint64_t seed,
                                   strata_topk_t **topk_out)
{
    if (!topk_out || max_count > (size_t)UINT32_MAX + 1) {
        util_error("agg: strata_topk_create: %s",
                   topk_out ? "max_count exceeds 2^32 (indices are uint32)"
                            : "topk_out is NULL");
        return STRATA_ERR_INVALID;
    }
    strata_topk_t *tk = util_calloc(1, sizeof(*tk));
    if (!tk)
        goto nomem;
    tk->keys = util_malloc((max_count ? max_count : 1) * sizeof(uint32_t));
    if (!tk->keys)
        goto free_tk;
    tk->max_count = max_count;
    tk->rng = seed;
    *topk_out = tk;
    return STRATA_OK;

free_tk:
    util_free(tk);
nomem:
    util_error("agg: top-k workspace for %zu elements: out of memory",
               max_count);
    return STRATA_ERR_NOMEM;
}

void strata_topk_destroy(strata_topk_t *tk)
{
    if (!tk)
        return;
    util_free(tk->keys);
    util_free(tk);
}

static strata_status_t agg_topk_check(const char *fn, const strata_topk_t *tk,
                                      const void *x, size_t count,
                                      const strata_sparse_t *out)
{
    if (!tk) {
        util_error("agg: %s: workspace is NULL", fn);
        return STRATA_ERR_INVALID;
    }
    if (count > tk->max_count) {
        util_error("agg: %s: %zu elements exceed the workspace's %zu", fn,
                   count, tk->max_count);
        return STRATA_ERR_RANGE;
    }
    if (count && (!x || !out)) {
        util_error("agg: %s: %s is NULL", fn, x ? "out" : "input");
        return STRATA_ERR_INVALID;
    }
    return STRATA_OK;
}

strata_status_t strata_topk_exact(strata_topk_t *tk, const float *x,
                                  size_t count, size_t k, strata_sparse_t *out)
{
    strata_status_t st = agg_topk_check("strata_topk_exact", tk, x, count, out);
    if (st)
        return st;
    if (k > count) {
        util_error("agg: strata_topk_exact: k %zu exceeds count %zu", k, count);
        return STRATA_ERR_INVALID;
    }
    if (k == 0)
        return STRATA_OK;
    for (size_t i = 0; i < count; i++)
        tk->keys[i] = agg_mag(x[i]);
    uint32_t kth = agg_kth_largest(tk->keys, count, k, &tk->rng);
    agg_emit_exact(x, NULL, count, k, kth, out);
    return STRATA_OK;
}

/* DGC's threshold: estimated on a sample, then refined on the whole tensor.
 * Returns the number of entries written. */
static size_t agg_topk_select(strata_topk_t *tk, float *r, size_t n,
                              double ratio, double sample_ratio,
                              strata_sparse_t *out)
{
    size_t k = strata_topk_k(n, ratio), ns = n;
    if (sample_ratio < 1.0 && (double)n > ceil(2.0 / ratio)) {
        ns = (size_t)ceil((double)n * sample_ratio);
        ns = ns < 1 ? 1 : ns > n ? n : ns;
    }
    if (ns == n) { /* no sampling: the threshold is exact */
        for (size_t i = 0; i < n; i++)
            tk->keys[i] = agg_mag(r[i]);
        uint32_t kth = agg_kth_largest(tk->keys, n, k, &tk->rng);
        return agg_emit_exact(r, r, n, k, kth, out);
    }
    for (size_t i = 0; i < ns; i++) /* with replacement, as DGC */
        tk->keys[i] = agg_mag(r[agg_rand_below(&tk->rng, n)]);
    uint32_t thr =
        agg_kth_largest(tk->keys, ns, strata_topk_k(ns, ratio), &tk->rng);
    size_t c = agg_count_at_least(r, n, thr);
    for (int it = 0; it < AGG_TOPK_ITERS; it++) {
        if (c > k) {
            if ((double)c > AGG_TOPK_UPPER * (double)k)
                return agg_emit_exact_among(tk, r, n, k, thr, out);
            break;
        }
        if ((double)c >= AGG_TOPK_LOWER * (double)k || thr == 0)
            break;
        thr = agg_shrink(thr);
        c = agg_count_at_least(r, n, thr);
    }
    return agg_emit_first(r, n, k, thr, out);
}

strata_status_t strata_topk_sparsify(strata_topk_t *tk, float *residual,
                                     const float *grad, size_t count,
                                     double ratio, double sample_ratio,
                                     strata_sparse_t *out, size_t *nout_out)
{
    const char *fn = "strata_topk_sparsify";
    strata_status_t st = agg_topk_check(fn, tk, residual, count, out);
    if (st)
        return st;
    if (!nout_out || !(ratio > 0.0 && ratio <= 1.0) || !(sample_ratio > 0.0)) {
        util_error("agg: %s: %s (ratio %g, sample_ratio %g)", fn,
                   nout_out ? "expected 0 < ratio <= 1 and sample_ratio > 0"
                            : "nout_out is NULL",
                   ratio, sample_ratio);
        return STRATA_ERR_INVALID;
    }
    if (count && grad) {
        st = strata_axpy(STRATA_FP32, residual, grad, count, 1.0f);
        if (st)
            return st;
    }
    *nout_out =
        count ? agg_topk_select(tk, residual, count, ratio, sample_ratio, out)
              : 0;
    return STRATA_OK;
}

static bool agg_sparse_dtype_ok(const char *fn, strata_dtype_t dtype)
{
    if (strata_dtype_size(dtype) != 0)
        return true;
    util_error("agg: %s: unknown dtype %d", fn, (int)dtype);
    return false;
}

/* dst[i] += v in dtype, through fp32 for the 16-bit types. */
static void agg_add_one(strata_dtype_t dtype, void *dst, size_t i, float v)
{
    if (dtype == STRATA_FP64)
        ((double *)dst)[i] += (double)v;
    else if (dtype == STRATA_FP32)
        ((float *)dst)[i] += v;
    else
        agg_store_as(dtype, dst, i, agg_widen16(dtype, dst, i) + v);
}

strata_status_t strata_sparse_scatter_add(strata_dtype_t dtype, void *dst,
                                          size_t count,
                                          const strata_sparse_t *entries,
                                          size_t nentries, float scale)
{
    const char *fn = "strata_sparse_scatter_add";
    if (!agg_sparse_dtype_ok(fn, dtype))
        return STRATA_ERR_INVALID;
    if (nentries && (!dst || !entries)) {
        util_error("agg: %s: %s is NULL", fn, dst ? "entries" : "dst");
        return STRATA_ERR_INVALID;
    }
    /* Check everything first, so that a bad message changes nothing. */
    for (size_t i = 0; i < nentries; i++) {
        if (entries[i].index >= count) {
            util_error("agg: %s: entry %zu of %zu has index %u, beyond the "
                       "%zu elements of the buffer",
                       fn, i, nentries, entries[i].index, count);
            return STRATA_ERR_RANGE;
        }
    }
    for (size_t i = 0; i < nentries; i++)
        agg_add_one(dtype, dst, entries[i].index, scale * entries[i].value);
    return STRATA_OK;
}

strata_status_t strata_residual_flush(strata_dtype_t dtype, void *dst,
                                      float *residual, size_t count)
{
    const char *fn = "strata_residual_flush";
    if (!agg_sparse_dtype_ok(fn, dtype))
        return STRATA_ERR_INVALID;
    if (count && (!dst || !residual)) {
        util_error("agg: %s: %s is NULL", fn, dst ? "residual" : "dst");
        return STRATA_ERR_INVALID;
    }
    for (size_t i = 0; i < count; i++) {
        float r = residual[i], sent = agg_store_as(dtype, dst, i, r);
        /* Exact when sent is finite: it is r rounded, within a factor of 2
         * of r (Sterbenz), or 0. An Inf or NaN sent (overflow, or a NaN
         * gradient) leaves nothing finite to keep. */
        residual[i] = isfinite(sent) ? r - sent : 0.0f;
    }
    return STRATA_OK;
}
