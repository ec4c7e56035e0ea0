/*
 * The reduction thread pool and strata_reduce_mt().
 *
 * A job is a number of chunks; the caller and the workers claim chunks from
 * one atomic ticket (job generation << 32 | chunks left), so a worker that
 * wakes late can never take a chunk of a later job, and reads the job only
 * after it has claimed a chunk of it. The caller returns once every chunk is
 * done. Idle workers spin briefly (jobs come in bursts), then sleep on a
 * condition variable; a call touches the mutex only if someone sleeps.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "agg/agg.h"
#include "agg/reduce.h"
#include "util/alloc.h"
#include "util/log.h"

/* Below this many bytes moved (cached data, tens of microseconds of work),
 * waking workers costs more than it can save. */
#define AGG_POOL_MIN_BYTES (4u << 20)
/* Bytes one chunk moves (all sources and the destination): one claim per
 * several hundred KiB costs nothing, and a job of a few MiB still splits
 * into enough chunks for the threads to finish together. */
#define AGG_POOL_CHUNK_BYTES (512u << 10)
#define AGG_POOL_SPINS 4096

struct strata_reduce_pool {
    unsigned nthreads; /* including the caller */
    pthread_t *workers;
    _Atomic uint64_t ticket;
    atomic_size_t done;
    atomic_uint sleepers;
    atomic_bool busy;
    atomic_bool stop;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    uint32_t gen; /* the caller's */
    /* The job: written before the ticket is published, read by a thread only
     * once it has claimed one of the job's chunks. */
    agg_task_fn fn;
    void *arg;
    size_t nchunks;
};

static inline void agg_cpu_relax(void)
{
    __builtin_ia32_pause();
}

/* Claims a chunk of job gen; returns false when none is left. */
static bool agg_pool_claim(strata_reduce_pool_t *pool, uint32_t gen,
                           size_t *chunk_out)
{
    uint64_t t = atomic_load_explicit(&pool->ticket, memory_order_acquire);
    do {
        if ((uint32_t)(t >> 32) != gen || (uint32_t)t == 0)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(
        &pool->ticket, &t, t - 1, memory_order_acq_rel, memory_order_acquire));
    *chunk_out = pool->nchunks - (uint32_t)t; /* in increasing order */
    return true;
}

static void agg_pool_work(strata_reduce_pool_t *pool, uint32_t gen)
{
    size_t chunk;
    while (agg_pool_claim(pool, gen, &chunk)) {
        pool->fn(pool->arg, chunk);
        atomic_fetch_add_explicit(&pool->done, 1, memory_order_release);
    }
}

/* Returns the generation of the next job, or 0 to stop. */
static uint32_t agg_pool_wait(strata_reduce_pool_t *pool, uint32_t last)
{
    for (int i = 0; i < AGG_POOL_SPINS; i++) {
        uint32_t g = (uint32_t)(atomic_load(&pool->ticket) >> 32);
        if (g != last || atomic_load(&pool->stop))
            return atomic_load(&pool->stop) ? 0 : g;
        agg_cpu_relax();
    }
    pthread_mutex_lock(&pool->lock);
    atomic_fetch_add(&pool->sleepers, 1);
    uint32_t g;
    while ((g = (uint32_t)(atomic_load(&pool->ticket) >> 32)) == last &&
           !atomic_load(&pool->stop))
        pthread_cond_wait(&pool->wake, &pool->lock);
    atomic_fetch_sub(&pool->sleepers, 1);
    pthread_mutex_unlock(&pool->lock);
    return atomic_load(&pool->stop) ? 0 : g;
}

static void *agg_pool_worker(void *arg)
{
    strata_reduce_pool_t *pool = arg;
    uint32_t gen = 0;
    while ((gen = agg_pool_wait(pool, gen)) != 0)
        agg_pool_work(pool, gen);
    return NULL;
}

/* Runs fn(arg, 0..nchunks-1) on the pool and the caller. */
static void agg_pool_run(strata_reduce_pool_t *pool, size_t nchunks,
                         agg_task_fn fn, void *arg)
{
    pool->fn = fn;
    pool->arg = arg;
    pool->nchunks = nchunks;
    atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
    if (++pool->gen == 0) /* 0 means "stop" to the workers */
        pool->gen = 1;
    atomic_store(&pool->ticket, (uint64_t)pool->gen << 32 | nchunks);
    if (atomic_load(&pool->sleepers)) {
        pthread_mutex_lock(&pool->lock);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->lock);
    }
    agg_pool_work(pool, pool->gen);
    /* Chunks still running belong to workers that are running too. */
    for (unsigned i = 0;
         atomic_load_explicit(&pool->done, memory_order_acquire) < nchunks;
         i++) {
        if (i < AGG_POOL_SPINS)
            agg_cpu_relax();
        else
            sched_yield(); /* a worker was preempted mid-chunk */
    }
}

static void agg_pool_stop(strata_reduce_pool_t *pool, unsigned started)
{
    atomic_store(&pool->stop, true);
    pthread_mutex_lock(&pool->lock);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (unsigned i = 0; i < started; i++)
        pthread_join(pool->workers[i], NULL);
}

strata_status_t strata_reduce_pool_create(unsigned nthreads,
                                          strata_reduce_pool_t **pool_out)
{
    if (!pool_out) {
        util_error("agg: strata_reduce_pool_create: pool_out is NULL");
        return STRATA_ERR_INVALID;
    }
    if (nthreads == 0)
        nthreads = agg_reduce_threads();
    strata_reduce_pool_t *pool = util_calloc(1, sizeof(*pool));
    if (!pool)
        goto nomem;
    pool->nthreads = nthreads;
    pool->workers = util_calloc(nthreads, sizeof(pthread_t));
    if (!pool->workers)
        goto free_pool;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    for (unsigned i = 0; i + 1 < nthreads; i++) {
        int err =
            pthread_create(&pool->workers[i], NULL, agg_pool_worker, pool);
        if (err) {
            util_error("agg: reduce pool: cannot start thread %u of %u: %s",
                       i + 1, nthreads - 1, strerror(err));
            agg_pool_stop(pool, i);
            pthread_cond_destroy(&pool->wake);
            pthread_mutex_destroy(&pool->lock);
            util_free(pool->workers);
            util_free(pool);
            return STRATA_ERR_NOMEM;
        }
        pthread_setname_np(pool->workers[i], "strata-reduce");
    }
    *pool_out = pool;
    return STRATA_OK;

free_pool:
    util_free(pool);
nomem:
    util_error("agg: reduce pool of %u threads: out of memory", nthreads);
    return STRATA_ERR_NOMEM;
}

void strata_reduce_pool_destroy(strata_reduce_pool_t *pool)
{
    if (!pool)
        return;
    agg_pool_stop(pool, pool->nthreads - 1);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->lock);
    util_free(pool->workers);
    util_free(pool);
}

unsigned strata_reduce_pool_threads(const strata_reduce_pool_t *pool)
{
    return pool ? pool->nthreads : 1;
}

/* Claims the pool for the calling thread. */
static strata_status_t agg_pool_enter(strata_reduce_pool_t *pool,
                                      const char *fn)
{
    if (atomic_exchange(&pool->busy, true)) {
        util_error("agg: %s: the reduce pool is in use by another thread; "
                   "a pool serves one caller at a time",
                   fn);
        return STRATA_ERR_STATE;
    }
    return STRATA_OK;
}

strata_status_t agg_pool_for(strata_reduce_pool_t *pool, size_t nchunks,
                             agg_task_fn fn, void *arg)
{
    if (!pool || pool->nthreads < 2 || nchunks < 2) {
        for (size_t c = 0; c < nchunks; c++)
            fn(arg, c);
        return STRATA_OK;
    }
    if (nchunks > UINT32_MAX) {
        util_error("agg: agg_pool_for: %zu chunks; at most 2^32-1", nchunks);
        return STRATA_ERR_INVALID;
    }
    strata_status_t st = agg_pool_enter(pool, "agg_pool_for");
    if (st)
        return st;
    agg_pool_run(pool, nchunks, fn, arg);
    atomic_store(&pool->busy, false);
    return STRATA_OK;
}

/* ---- element-wise work over the pool ---- */

/* A job on elements [0, count), cut into chunks of chunk elements. */
typedef struct agg_range {
    void (*run)(const void *job, size_t off, size_t n);
    const void *job;
    size_t count, chunk;
} agg_range_t;

static void agg_range_chunk(void *arg, size_t c)
{
    const agg_range_t *r = arg;
    size_t off = c * r->chunk;
    r->run(r->job, off, r->count - off < r->chunk ? r->count - off : r->chunk);
}

/*
 * Runs run(job, off, n) over [0, count): esize is the size of an element of
 * the destination, moved the bytes all buffers move per element. Chunks move
 * about AGG_POOL_CHUNK_BYTES and hold whole 4 KiB of the destination (so
 * they start on its cache-line offset); small jobs run on the caller alone.
 */
static strata_status_t agg_pool_range(const char *fn,
                                      strata_reduce_pool_t *pool, size_t count,
                                      size_t esize, size_t moved,
                                      void (*run)(const void *, size_t, size_t),
                                      const void *job)
{
    size_t bytes = AGG_POOL_CHUNK_BYTES / moved * esize;
    bytes = bytes < 4096 ? 4096 : bytes & ~(size_t)4095;
    agg_range_t r = {run, job, count, bytes / esize};
    if (count / r.chunk >= UINT32_MAX) /* 16 TiB and more: larger chunks */
        r.chunk = count / (UINT32_MAX - 1) + 1;
    size_t nchunks = (count + r.chunk - 1) / r.chunk;
    if (!pool || pool->nthreads < 2 || nchunks < 2 ||
        count < AGG_POOL_MIN_BYTES / moved) {
        run(job, 0, count);
        return STRATA_OK;
    }
    strata_status_t st = agg_pool_enter(pool, fn);
    if (st)
        return st;
    agg_pool_run(pool, nchunks, agg_range_chunk, &r);
    atomic_store(&pool->busy, false);
    return STRATA_OK;
}

typedef struct agg_reduce_job {
    agg_reduce_fn fn;
    void *dst;
    const void *const *srcs;
    size_t nsrc;
    double scale;
    unsigned flags;
} agg_reduce_job_t;

static void agg_reduce_range(const void *arg, size_t off, size_t n)
{
    const agg_reduce_job_t *j = arg;
    j->fn(j->dst, j->srcs, j->nsrc, off, n, j->scale, j->flags);
}

static strata_status_t agg_reduce_mt(const char *fn, bool acc,
                                     strata_reduce_pool_t *pool,
                                     strata_dtype_t dtype, void *dst,
                                     const void *const *srcs, size_t nsrc,
                                     size_t count, double scale)
{
    agg_reduce_job_t job = {
        .dst = dst, .srcs = srcs, .nsrc = nsrc, .scale = scale};
    strata_status_t st = agg_reduce_prepare(fn, acc, dtype, dst, srcs, nsrc,
                                            count, &job.fn, &job.flags);
    if (st != STRATA_OK || !job.fn)
        return st;
    size_t esize = strata_dtype_size(dtype);
    return agg_pool_range(fn, pool, count, esize, (nsrc + 1) * esize,
                          agg_reduce_range, &job);
}

strata_status_t strata_reduce_mt(strata_reduce_pool_t *pool,
                                 strata_dtype_t dtype, void *dst,
                                 const void *const *srcs, size_t nsrc,
                                 size_t count, double scale)
{
    return agg_reduce_mt("strata_reduce_mt", false, pool, dtype, dst, srcs,
                         nsrc, count, scale);
}

strata_status_t strata_reduce_acc_mt(strata_reduce_pool_t *pool,
                                     strata_dtype_t dtype, void *dst,
                                     const void *const *srcs, size_t nsrc,
                                     size_t count, double scale)
{
    return agg_reduce_mt("strata_reduce_acc_mt", true, pool, dtype, dst, srcs,
                         nsrc, count, scale);
}

typedef struct agg_sgd_job {
    agg_sgd_fn fn;
    const strata_sgd_t *sgd;
    float *w, *v;
    const void *const *grads;
    size_t ngrads;
} agg_sgd_job_t;

static void agg_sgd_range(const void *arg, size_t off, size_t n)
{
    const agg_sgd_job_t *j = arg;
    j->fn(j->sgd, j->w, j->v, j->grads, j->ngrads, off, n);
}

strata_status_t strata_sgd_update_sum_mt(strata_reduce_pool_t *pool,
                                         const strata_sgd_t *sgd,
                                         strata_dtype_t grad_dtype,
                                         float *master, float *momentum_buf,
                                         const void *const *grads,
                                         size_t ngrads, size_t count)
{
    const char *fn = "strata_sgd_update_sum_mt";
    strata_status_t st = agg_sgd_check(fn, sgd, grad_dtype, master,
                                       momentum_buf, grads, ngrads, count);
    if (st || count == 0)
        return st;
    const agg_ops_t *ops = agg_ops();
    if (!ops)
        return STRATA_ERR_CONFIG;
    agg_sgd_job_t job = {ops->sgd[grad_dtype],
                         sgd,
                         master,
                         sgd->momentum != 0.0f ? momentum_buf : NULL,
                         grads,
                         ngrads};
    /* master and the momentum read and written, the gradients read */
    size_t moved = ngrads * strata_dtype_size(grad_dtype) + 16;
    return agg_pool_range(fn, pool, count, sizeof(float), moved, agg_sgd_range,
                          &job);
}
