/* The driver's shared-memory view of a running job. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "perf/train/board.h"
#include "perf/train/log.h"
#include "perf/train/pace.h"

#define BOARD_MAGIC 0x53545442u /* "STTB" */
#define BOARD_VERSION 1u

static size_t models_offset(void)
{
    return (sizeof(perf_board_t) + 63) / 64 * 64;
}

static uint64_t board_size(uint64_t params)
{
    return models_offset() + 2 * params * sizeof(float);
}

float *perf_board_snapshot(perf_board_t *b)
{
    return (float *)((char *)b + models_offset());
}

float *perf_board_final(perf_board_t *b)
{
    return perf_board_snapshot(b) + b->params;
}

static strata_status_t board_map(const char *path, int fd, uint64_t size,
                                 perf_board_t **board_out)
{
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        perf_error("%s: cannot map %llu bytes: %s", path,
                   (unsigned long long)size, strerror(errno));
        return STRATA_ERR_IO;
    }
    *board_out = m;
    return STRATA_OK;
}

strata_status_t perf_board_create(const char *path, uint64_t params,
                                  perf_board_t **board_out)
{
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        perf_error("%s: cannot create: %s", path, strerror(errno));
        return STRATA_ERR_IO;
    }
    uint64_t size = board_size(params);
    strata_status_t st = STRATA_OK;
    if (ftruncate(fd, (off_t)size) != 0) {
        perf_error("%s: cannot size to %llu bytes: %s", path,
                   (unsigned long long)size, strerror(errno));
        st = STRATA_ERR_IO;
    }
    perf_board_t *b = NULL;
    if (st == STRATA_OK)
        st = board_map(path, fd, size, &b);
    close(fd);
    if (st != STRATA_OK)
        return st;
    /* The file is new, hence zero: every counter and state starts at 0. */
    b->size = size;
    b->params = params;
    b->version = BOARD_VERSION;
    b->magic = BOARD_MAGIC;
    *board_out = b;
    return STRATA_OK;
}

strata_status_t perf_board_open(const char *path, perf_board_t **board_out)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        perf_error("%s: cannot open the driver's board: %s", path,
                   strerror(errno));
        return STRATA_ERR_IO;
    }
    struct stat s;
    strata_status_t st = STRATA_OK;
    if (fstat(fd, &s) != 0 || (size_t)s.st_size < sizeof(perf_board_t)) {
        perf_error("%s: not a board of this driver (%lld bytes)", path,
                   (long long)s.st_size);
        st = STRATA_ERR_PROTO;
    }
    perf_board_t *b = NULL;
    if (st == STRATA_OK)
        st = board_map(path, fd, (uint64_t)s.st_size, &b);
    close(fd);
    if (st != STRATA_OK)
        return st;
    if (b->magic != BOARD_MAGIC || b->version != BOARD_VERSION ||
        b->size != (uint64_t)s.st_size || b->size != board_size(b->params)) {
        perf_error("%s: not a board of this driver version (magic %08x, "
                   "version %u)",
                   path, b->magic, b->version);
        munmap(b, (size_t)s.st_size);
        return STRATA_ERR_PROTO;
    }
    *board_out = b;
    return STRATA_OK;
}

void perf_board_close(perf_board_t *b)
{
    if (b)
        munmap(b, b->size);
}

void perf_board_offer(perf_board_t *b, const float *params)
{
    if (atomic_load_explicit(&b->snap_state, memory_order_acquire) !=
        PERF_SNAP_WANTED)
        return;
    memcpy(perf_board_snapshot(b), params, b->params * sizeof(float));
    b->snap_ns = perf_now_ns();
    atomic_store_explicit(&b->snap_state, PERF_SNAP_READY,
                          memory_order_release);
}

void perf_board_finish(perf_board_t *b, const float *params)
{
    memcpy(perf_board_final(b), params, b->params * sizeof(float));
    b->final_ns = perf_now_ns();
    atomic_store_explicit(&b->final_set, 1, memory_order_release);
}

void perf_board_request(perf_board_t *b)
{
    int idle = PERF_SNAP_IDLE;
    atomic_compare_exchange_strong_explicit(
        &b->snap_state, &idle, PERF_SNAP_WANTED, memory_order_release,
        memory_order_relaxed);
}

int perf_board_ready(perf_board_t *b, int64_t *ns_out)
{
    if (atomic_load_explicit(&b->snap_state, memory_order_acquire) !=
        PERF_SNAP_READY)
        return 0;
    *ns_out = b->snap_ns;
    return 1;
}

void perf_board_release(perf_board_t *b)
{
    atomic_store_explicit(&b->snap_state, PERF_SNAP_IDLE, memory_order_release);
}

int64_t perf_board_start(perf_board_t *b)
{
    int64_t expected = 0, now = perf_now_ns();
    if (atomic_compare_exchange_strong(&b->t0_ns, &expected, now))
        return now;
    return expected;
}
