/*
 * Strata aggregation kernels: N-source reductions, optimizer updates, top-k
 * sparsification and CRC32C. Aggregators use them on received shards;
 * frameworks may call them directly.
 *
 * Instruction set
 *   Every kernel exists for a portable scalar path, AVX2 (+F16C) and
 *   AVX-512 (F/BW/VL, with AVX512_BF16 conversions where the CPU has them).
 *   The best path the CPU supports is chosen once, on first use, unless
 *   STRATA_SIMD (auto|scalar|avx2|avx512) forces one; forcing a path the CPU
 *   lacks is a configuration error. All paths give the same results: for
 *   fp32 and fp64 bit-identical ones (except NaN payloads, which IEEE leaves
 *   open), because the order of every operation is fixed and no path fuses a
 *   multiply with an add.
 *
 * Element types (strata_dtype_t)
 *   fp16 and bf16 are accumulated in fp32 and rounded once, to nearest even;
 *   a NaN stays a NaN, overflow gives Inf. Kernels assume the default
 *   floating-point environment (round to nearest, no flush-to-zero).
 *
 * Memory
 *   Buffers need only the alignment of their element type. A destination may be
 * the very same buffer as a source (in-place); partial overlaps are undefined.
 * No kernel allocates or makes a system call.
 */
#ifndef STRATA_STRATA_AGG_H
#define STRATA_STRATA_AGG_H

#include <stddef.h>
#include <stdint.h>

#include <strata/strata.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Most sources one reduction sums. */
#define STRATA_REDUCE_MAX_SOURCES 64

/* Bytes of one element (0 for a value outside strata_dtype_t). */
size_t strata_dtype_size(strata_dtype_t dtype);

/* "fp32", "fp64", "fp16", "bf16"; "?" for a value outside strata_dtype_t. */
const char *strata_dtype_name(strata_dtype_t dtype);

/* ---- instruction set --------------------------------------------------- */

/* Use the path named "scalar", "avx2" or "avx512" from now on, or the best
 * one ("auto"). STRATA_ERR_UNSUPPORTED (logged with what this CPU has) when
 * the CPU lacks it, STRATA_ERR_INVALID for an unknown name. */
strata_status_t strata_simd_select(const char *isa);

/* Name of the path in use, e.g. "avx512"; NULL when the configuration
 * (STRATA_SIMD) is invalid. */
const char *strata_simd_name(void);

/* Whether this CPU can run the named path. */
bool strata_simd_supported(const char *isa);

/* ---- reductions --------------------------------------------------------- */

/*
 * dst[i] = scale * (srcs[0][i] + srcs[1][i] + ... + srcs[nsrc-1][i])
 * for i in [0, count). The sum is formed in this order, then multiplied by
 * scale (rounded to fp32 for fp32, fp16 and bf16, used as is for fp64).
 * nsrc is 1..STRATA_REDUCE_MAX_SOURCES; count may be 0.
 */
strata_status_t strata_reduce(strata_dtype_t dtype, void *dst,
                              const void *const *srcs, size_t nsrc,
                              size_t count, double scale);

/* dst[i] = dst[i] + scale * (srcs[0][i] + ... + srcs[nsrc-1][i]), the sum
 * and its scaling exactly as in strata_reduce, then one rounding for fp16
 * and bf16. */
strata_status_t strata_reduce_acc(strata_dtype_t dtype, void *dst,
                                  const void *const *srcs, size_t nsrc,
                                  size_t count, double scale);

/*
 * A persistent pool of threads that share large reductions. The calling
 * thread works too, so a pool of n threads starts n - 1; nthreads 0 means
 * STRATA_REDUCE_THREADS (whose 0 means the cores available to the process).
 * A call splits the buffers into chunks of about 512 KiB moved and
 * allocates nothing; work moving less than 4 MiB (sources and destination
 * together) stays on the caller. One thread at a time may use a pool: a
 * concurrent call fails with STRATA_ERR_STATE. Results are identical to the
 * single-threaded calls.
 */
typedef struct strata_reduce_pool strata_reduce_pool_t;

strata_status_t strata_reduce_pool_create(unsigned nthreads,
                                          strata_reduce_pool_t **pool_out);
void strata_reduce_pool_destroy(strata_reduce_pool_t *pool);
unsigned strata_reduce_pool_threads(const strata_reduce_pool_t *pool);

/* strata_reduce and strata_reduce_acc over a pool (NULL: the caller only). */
strata_status_t strata_reduce_mt(strata_reduce_pool_t *pool,
                                 strata_dtype_t dtype, void *dst,
                                 const void *const *srcs, size_t nsrc,
                                 size_t count, double scale);
strata_status_t strata_reduce_acc_mt(strata_reduce_pool_t *pool,
                                     strata_dtype_t dtype, void *dst,
                                     const void *const *srcs, size_t nsrc,
                                     size_t count, double scale);

/* ---- optimizer updates on an fp32 master copy --------------------------- */

/* dst[i] = master[i] rounded to dtype (to nearest even): the model a 16-bit
 * tensor's fp32 master copy gives. dst must not overlap master. */
strata_status_t strata_master_store(strata_dtype_t dtype, void *dst,
                                    const float *master, size_t count);

/* y[i] += alpha * x[i]; y is fp32, x is fp32, fp16 or bf16. */
strata_status_t strata_axpy(strata_dtype_t x_dtype, float *y, const void *x,
                            size_t count, float alpha);

typedef struct strata_sgd {
    float lr;           /* learning rate */
    float momentum;     /* mu; 0: plain SGD (the momentum buffer may be NULL) */
    float weight_decay; /* L2 coefficient added to the gradient */
    float grad_scale;   /* gradients are first multiplied by this (e.g. 1/N) */
    bool nesterov;      /* Nesterov momentum */
} strata_sgd_t;

/*
 * One SGD step, as PyTorch's torch.optim.SGD (dampening 0) computes it:
 *   g  = grad_scale * grad[i] + weight_decay * w[i]
 *   v  = momentum * v[i] + g;  v[i] = v           (when momentum != 0)
 *   d  = nesterov ? g + momentum * v : v          (g when momentum == 0)
 *   w[i] = w[i] - lr * d
 * w (master) and v (momentum buffer, zero at the start) are fp32; grad is
 * fp32, fp16 or bf16.
 */
strata_status_t strata_sgd_update(const strata_sgd_t *sgd,
                                  strata_dtype_t grad_dtype, float *master,
                                  float *momentum_buf, const void *grad,
                                  size_t count);

/*
 * strata_sgd_update with the gradient the sum of ngrads buffers (1..64, all
 * of grad_dtype), summed in fp32 in order as strata_reduce sums them, in one
 * pass over a pool (NULL: the caller only): an aggregator's sum and update
 * without an intermediate buffer. With fp32 gradients the result is
 * bit-identical to strata_reduce into an fp32 buffer with scale 1, then
 * strata_sgd_update on it.
 */
strata_status_t strata_sgd_update_sum_mt(strata_reduce_pool_t *pool,
                                         const strata_sgd_t *sgd,
                                         strata_dtype_t grad_dtype,
                                         float *master, float *momentum_buf,
                                         const void *const *grads,
                                         size_t ngrads, size_t count);

/* ---- top-k sparsification (GDTopK, DGC) --------------------------------- */

/* One element of a sparse update; the wire encoding is this struct, little
 * endian, 8 bytes. */
typedef struct strata_sparse {
    uint32_t index;
    float value;
} strata_sparse_t;

/* Workspace of the top-k kernels (scratch sized for max_count elements and
 * a random generator seeded with seed), so that calls do not allocate. A
 * workspace serves one thread at a time. */
typedef struct strata_topk strata_topk_t;

strata_status_t strata_topk_create(size_t max_count, uint64_t seed,
                                   strata_topk_t **topk_out);
void strata_topk_destroy(strata_topk_t *topk);

/* k = ceil(count * ratio), at least 1 for a nonempty buffer, at most count.
 */
size_t strata_topk_k(size_t count, double ratio);

/*
 * Error-feedback sparsification of one tensor, as DGC and GDTopK do it:
 *   residual += grad                       (skipped when grad is NULL)
 *   pick about k = strata_topk_k(count, ratio) elements of largest
 *     |residual|, through a threshold estimated on a random sample of
 *     ceil(count * sample_ratio) elements (all when sample_ratio >= 1 or
 *     count is small) and refined as DGC does (lower it by 0.8 while fewer
 *     than 0.8 k pass, up to 10 times; exact top-k among the candidates when
 *     more than 1.3 k pass);
 *   write them to out (at most k entries, increasing index) and zero them in
 *     residual.
 * So what was sent plus the residual always equals the sum of the gradients.
 * count <= max_count of the workspace and < 2^32; out holds k entries.
 */
strata_status_t strata_topk_sparsify(strata_topk_t *topk, float *residual,
                                     const float *grad, size_t count,
                                     double ratio, double sample_ratio,
                                     strata_sparse_t *out, size_t *nout_out);

/* The exact top-k of |x| (ties to the lower index), in increasing index
 * order: the reference sparsify is tested against. out holds k entries. */
strata_status_t strata_topk_exact(strata_topk_t *topk, const float *x,
                                  size_t count, size_t k, strata_sparse_t *out);

/* dst[e.index] += scale * e.value for every entry (repeated indices add up),
 * dst of any dtype: an fp16 or bf16 element is widened to fp32, added to,
 * and rounded once per entry (to nearest even), as strata_reduce_acc does
 * for a dense source. An index >= count is STRATA_ERR_RANGE, and then dst is
 * left untouched. */
strata_status_t strata_sparse_scatter_add(strata_dtype_t dtype, void *dst,
                                          size_t count,
                                          const strata_sparse_t *entries,
                                          size_t nentries, float scale);

/* A dense send of an fp32 residual as dtype (GDTopK's flush):
 *   dst[i] = residual[i] rounded to dtype (to nearest even);
 *   residual[i] -= dst[i]   (exact: what rounding left out stays behind)
 * so what was sent plus the residual still equals the sum of the gradients;
 * for fp32 and fp64 the residual becomes 0. dst must not overlap residual.
 */
strata_status_t strata_residual_flush(strata_dtype_t dtype, void *dst,
                                      float *residual, size_t count);

/* ---- checksums ---------------------------------------------------------- */

/*
 * CRC-32C (Castagnoli, as iSCSI, ext4 and RDMA use), with the usual
 * pre- and post-inversion: strata_crc32c(0, "123456789", 9) == 0xE3069283.
 * Chain pieces by passing the previous result as crc (start with 0).
 */
uint32_t strata_crc32c(uint32_t crc, const void *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_STRATA_AGG_H */
