/* Shard checkpoints on disk (engine/ckpt.h). */
#include "engine/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <strata/strata_agg.h>

#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"

#define ENG_CKPT_MAGIC "STRATACK"
#define ENG_CKPT_VERSION 1u
#define ENG_CKPT_HDR                                                           \
    48 /* magic 8, version, shard, shards, 0, clock, hash,                     \
          bytes */
#define ENG_CKPT_CHUNK ((size_t)1 << 20) /* reading other shards' files */

struct eng_ckpt {
    char *dir;
    eng_ckpt_shape_t shape;
    void *staging;
    unsigned char *chunk;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    _Atomic bool busy; /* the thread owns staging */
    bool stop;
    int64_t clock; /* of the write asked for */
};

typedef struct eng_ckpt_hdr {
    uint32_t version, shard, nshards;
    int64_t clock;
    uint64_t layout_hash, bytes;
} eng_ckpt_hdr_t;

static void eng_ckpt_put(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t eng_ckpt_get(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void eng_ckpt_hdr_encode(const eng_ckpt_hdr_t *h, unsigned char *b)
{
    memcpy(b, ENG_CKPT_MAGIC, 8);
    eng_ckpt_put(b + 8, h->version, 4);
    eng_ckpt_put(b + 12, h->shard, 4);
    eng_ckpt_put(b + 16, h->nshards, 4);
    eng_ckpt_put(b + 20, 0, 4);
    eng_ckpt_put(b + 24, (uint64_t)h->clock, 8);
    eng_ckpt_put(b + 32, h->layout_hash, 8);
    eng_ckpt_put(b + 40, h->bytes, 8);
}

static bool eng_ckpt_hdr_decode(const unsigned char *b, eng_ckpt_hdr_t *h)
{
    h->version = (uint32_t)eng_ckpt_get(b + 8, 4);
    h->shard = (uint32_t)eng_ckpt_get(b + 12, 4);
    h->nshards = (uint32_t)eng_ckpt_get(b + 16, 4);
    h->clock = (int64_t)eng_ckpt_get(b + 24, 8);
    h->layout_hash = eng_ckpt_get(b + 32, 8);
    h->bytes = eng_ckpt_get(b + 40, 8);
    return memcmp(b, ENG_CKPT_MAGIC, 8) == 0;
}

static void eng_ckpt_path(const eng_ckpt_t *c, uint32_t shard, int64_t clock,
                          const char *suffix, char *buf, size_t len)
{
    snprintf(buf, len, "%s/strata-shard-%u-of-%u.%" PRId64 ".ckpt%s", c->dir,
             shard, c->shape.nshards, clock, suffix);
}

/* A checkpoint file name's shard and clock; tmp: a temporary file's. */
static bool eng_ckpt_parse(const eng_ckpt_t *c, const char *name,
                           uint32_t *shard, int64_t *clock, bool *tmp)
{
    unsigned s, n;
    long long cl;
    int end = -1;
    if (sscanf(name, "strata-shard-%u-of-%u.%lld.ckpt%n", &s, &n, &cl, &end) !=
            3 ||
        end < 0 || n != c->shape.nshards || cl < 0)
        return false;
    *tmp = strcmp(name + end, ".tmp") == 0;
    if (name[end] != '\0' && !*tmp)
        return false;
    *shard = s;
    *clock = cl;
    return true;
}

static int eng_ckpt_cmp_desc(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* The clocks of the shard's files, newest first (tmp: its temporary
 * files', which it removes instead). */
static strata_status_t eng_ckpt_scan(const eng_ckpt_t *c, bool tmp,
                                     int64_t **clocks_out, size_t *n_out)
{
    DIR *d = opendir(c->dir);
    if (!d) {
        util_error("checkpoint directory %s cannot be read: %s", c->dir,
                   strerror(errno));
        return STRATA_ERR_IO;
    }
    int64_t *clocks = NULL;
    size_t n = 0, cap = 0;
    strata_status_t st = STRATA_OK;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        uint32_t shard;
        int64_t clock;
        bool is_tmp;
        if (!eng_ckpt_parse(c, e->d_name, &shard, &clock, &is_tmp) ||
            shard != c->shape.shard || is_tmp != tmp)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *more = util_realloc(clocks, cap * sizeof(*clocks));
            if (!more) {
                st = STRATA_ERR_NOMEM;
                util_error("out of memory listing checkpoints in %s", c->dir);
                break;
            }
            clocks = more;
        }
        clocks[n++] = clock;
    }
    closedir(d);
    if (st != STRATA_OK) {
        util_free(clocks);
        return st;
    }
    if (n > 1) /* none found: clocks is NULL, which qsort must not get */
        qsort(clocks, n, sizeof(*clocks), eng_ckpt_cmp_desc);
    *clocks_out = clocks;
    *n_out = n;
    return STRATA_OK;
}

/* ---- writing ---- */

static bool eng_ckpt_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        len -= (size_t)w;
    }
    return true;
}

static void eng_ckpt_sync_dir(const eng_ckpt_t *c)
{
    int fd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Removes the shard's files beyond the newest ENG_CKPT_KEEP. */
static void eng_ckpt_prune(const eng_ckpt_t *c)
{
    int64_t *clocks;
    size_t n;
    if (eng_ckpt_scan(c, false, &clocks, &n) != STRATA_OK)
        return;
    char path[PATH_MAX];
    for (size_t i = ENG_CKPT_KEEP; i < n; i++) {
        eng_ckpt_path(c, c->shape.shard, clocks[i], "", path, sizeof(path));
        if (unlink(path) != 0)
            util_warn("cannot remove the old checkpoint %s: %s", path,
                      strerror(errno));
    }
    util_free(clocks);
}

static void eng_ckpt_write_file(eng_ckpt_t *c, int64_t clock)
{
    char path[PATH_MAX], tmp[PATH_MAX];
    eng_ckpt_path(c, c->shape.shard, clock, "", path, sizeof(path));
    eng_ckpt_path(c, c->shape.shard, clock, ".tmp", tmp, sizeof(tmp));
    unsigned char hdr[ENG_CKPT_HDR], tail[4];
    eng_ckpt_hdr_t h = {.version = ENG_CKPT_VERSION,
                        .shard = c->shape.shard,
                        .nshards = c->shape.nshards,
                        .clock = clock,
                        .layout_hash = c->shape.layout_hash,
                        .bytes = c->shape.bytes};
    eng_ckpt_hdr_encode(&h, hdr);
    uint32_t crc = strata_crc32c(0, hdr, sizeof(hdr));
    crc = strata_crc32c(crc, c->staging, c->shape.bytes);
    eng_ckpt_put(tail, crc, 4);
    uint64_t t0 = util_now_ns();
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        goto fail;
    bool ok = eng_ckpt_write_all(fd, hdr, sizeof(hdr)) &&
              eng_ckpt_write_all(fd, c->staging, c->shape.bytes) &&
              eng_ckpt_write_all(fd, tail, sizeof(tail)) && fsync(fd) == 0;
    int err = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    errno = err;
    if (!ok || rename(tmp, path) != 0)
        goto remove_tmp;
    eng_ckpt_sync_dir(c);
    util_info("checkpoint %s written (%" PRIu64 " bytes, %.3f s)", path,
              c->shape.bytes, (double)(util_now_ns() - t0) * 1e-9);
    eng_ckpt_prune(c);
    return;
remove_tmp:
    err = errno;
    unlink(tmp);
    errno = err;
fail:
    util_error("cannot write the checkpoint %s: %s (the previous checkpoints "
               "stay)",
               path, strerror(errno));
}

static void *eng_ckpt_main(void *arg)
{
    eng_ckpt_t *c = arg;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!atomic_load(&c->busy) && !c->stop)
            pthread_cond_wait(&c->cond, &c->lock);
        if (!atomic_load(&c->busy))
            break;
        int64_t clock = c->clock;
        pthread_mutex_unlock(&c->lock);
        eng_ckpt_write_file(c, clock);
        pthread_mutex_lock(&c->lock);
        atomic_store(&c->busy, false);
        pthread_cond_broadcast(&c->cond);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

void eng_ckpt_write(eng_ckpt_t *c, int64_t clock)
{
    pthread_mutex_lock(&c->lock);
    c->clock = clock;
    atomic_store(&c->busy, true);
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

void eng_ckpt_drain(eng_ckpt_t *c)
{
    pthread_mutex_lock(&c->lock);
    while (atomic_load(&c->busy))
        pthread_cond_wait(&c->cond, &c->lock);
    pthread_mutex_unlock(&c->lock);
}

void *eng_ckpt_staging(eng_ckpt_t *c)
{
    return c->staging;
}

bool eng_ckpt_busy(const eng_ckpt_t *c)
{
    return atomic_load(&((eng_ckpt_t *)c)->busy);
}

/* ---- opening and closing ---- */

static void eng_ckpt_remove_tmp(const eng_ckpt_t *c)
{
    int64_t *clocks;
    size_t n;
    if (eng_ckpt_scan(c, true, &clocks, &n) != STRATA_OK)
        return;
    char path[PATH_MAX];
    for (size_t i = 0; i < n; i++) {
        eng_ckpt_path(c, c->shape.shard, clocks[i], ".tmp", path, sizeof(path));
        util_info("removing %s, a checkpoint never finished", path);
        unlink(path);
    }
    util_free(clocks);
}

strata_status_t eng_ckpt_open(const char *dir, const eng_ckpt_shape_t *shape,
                              eng_ckpt_t **ckpt_out)
{
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) ||
        access(dir, W_OK | X_OK) != 0) {
        util_error("STRATA_CHECKPOINT_DIR=%s is not a directory this process "
                   "can write: %s",
                   dir, errno ? strerror(errno) : "not a directory");
        return STRATA_ERR_CONFIG;
    }
    eng_ckpt_t *c = util_calloc(1, sizeof(*c));
    if (!c)
        goto nomem;
    c->shape = *shape;
    c->shape.shard_nparts = util_malloc(sizeof(uint32_t) * shape->nshards);
    if (c->shape.shard_nparts)
        memcpy((uint32_t *)c->shape.shard_nparts, shape->shard_nparts,
               sizeof(uint32_t) * shape->nshards);
    c->dir = util_strdup(dir);
    c->staging = util_aligned_alloc(64, shape->bytes ? shape->bytes : 64);
    c->chunk = util_malloc(ENG_CKPT_CHUNK);
    if (!c->dir || !c->staging || !c->chunk || !c->shape.shard_nparts)
        goto free_ckpt;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    if (pthread_create(&c->thread, NULL, eng_ckpt_main, c) != 0) {
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->lock);
        goto free_ckpt;
    }
    eng_ckpt_remove_tmp(c);
    *ckpt_out = c;
    return STRATA_OK;
free_ckpt:
    util_free((void *)c->shape.shard_nparts);
    util_free(c->dir);
    util_free(c->staging);
    util_free(c->chunk);
    util_free(c);
nomem:
    util_error("out of memory (or threads) for checkpoints of %llu bytes",
               (unsigned long long)shape->bytes);
    return STRATA_ERR_NOMEM;
}

void eng_ckpt_close(eng_ckpt_t *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->stop = true;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->thread, NULL);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    util_free((void *)c->shape.shard_nparts);
    util_free(c->dir);
    util_free(c->staging);
    util_free(c->chunk);
    util_free(c);
}

/* ---- reading ---- */

static bool eng_ckpt_read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t r = read(fd, p, len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        len -= (size_t)r;
    }
    return true;
}

/* Whether the file is shard's whole checkpoint of clock, in this layout;
 * its payload read into dst (NULL: only checked). why: what is wrong. */
static bool eng_ckpt_check_fd(eng_ckpt_t *c, int fd, uint32_t shard,
                              int64_t clock, void *dst, char *why, size_t len)
{
    unsigned char hdr[ENG_CKPT_HDR], tail[4];
    eng_ckpt_hdr_t h;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !eng_ckpt_read_all(fd, hdr, sizeof(hdr)) ||
        !eng_ckpt_hdr_decode(hdr, &h)) {
        snprintf(why, len, "no checkpoint header");
        return false;
    }
    if (h.version != ENG_CKPT_VERSION || h.shard != shard ||
        h.nshards != c->shape.nshards || h.clock != clock) {
        snprintf(why, len,
                 "its header says version %u, shard %u of %u, clock %" PRId64,
                 h.version, h.shard, h.nshards, h.clock);
        return false;
    }
    if (h.layout_hash != c->shape.layout_hash ||
        (dst && h.bytes != c->shape.bytes)) {
        snprintf(why, len,
                 "another layout (the tensors or STRATA_PARTITION_BYTES "
                 "differ)");
        return false;
    }
    uint64_t want = ENG_CKPT_HDR + h.bytes + 4;
    if ((uint64_t)sb.st_size != want) {
        snprintf(why, len, "torn: %lld bytes, expected %llu",
                 (long long)sb.st_size, (unsigned long long)want);
        return false;
    }
    uint32_t crc = strata_crc32c(0, hdr, sizeof(hdr));
    for (uint64_t off = 0; off < h.bytes;) {
        size_t n = h.bytes - off < ENG_CKPT_CHUNK ? (size_t)(h.bytes - off)
                                                  : ENG_CKPT_CHUNK;
        unsigned char *p = dst ? (unsigned char *)dst + off : c->chunk;
        if (!eng_ckpt_read_all(fd, p, n)) {
            snprintf(why, len, "unreadable at byte %llu: %s",
                     (unsigned long long)(ENG_CKPT_HDR + off), strerror(errno));
            return false;
        }
        crc = strata_crc32c(crc, p, n);
        off += n;
    }
    if (!eng_ckpt_read_all(fd, tail, sizeof(tail)) ||
        (uint32_t)eng_ckpt_get(tail, 4) != crc) {
        snprintf(why, len, "corrupt: its CRC32C does not match its contents");
        return false;
    }
    return true;
}

static bool eng_ckpt_check(eng_ckpt_t *c, uint32_t shard, int64_t clock,
                           void *dst, char *path, size_t plen, char *why,
                           size_t wlen)
{
    eng_ckpt_path(c, shard, clock, "", path, plen);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, wlen, "%s", strerror(errno));
        return false;
    }
    bool ok = eng_ckpt_check_fd(c, fd, shard, clock, dst, why, wlen);
    close(fd);
    return ok;
}

strata_status_t eng_ckpt_load(eng_ckpt_t *c, int64_t *clock_out)
{
    int64_t *clocks;
    size_t n;
    *clock_out = -1;
    strata_status_t st = eng_ckpt_scan(c, false, &clocks, &n);
    if (st != STRATA_OK)
        return st;
    char refused[PATH_MAX] = "", path[PATH_MAX], why[256];
    for (size_t i = 0; i < n && *clock_out < 0; i++) {
        bool ok = true;
        for (uint32_t k = 0; k < c->shape.nshards && ok; k++) {
            /* this shard's own file first, read in for use */
            uint32_t s = (c->shape.shard + k) % c->shape.nshards;
            if (c->shape.shard_nparts[s] == 0)
                continue;
            ok = eng_ckpt_check(c, s, clocks[i], k == 0 ? c->staging : NULL,
                                path, sizeof(path), why, sizeof(why));
            if (!ok && refused[0] == '\0')
                snprintf(refused, sizeof(refused), "%s", path);
            if (!ok)
                util_warn("checkpoint %s refused: %s", path, why);
        }
        if (ok)
            *clock_out = clocks[i];
    }
    if (*clock_out >= 0) {
        eng_ckpt_path(c, c->shape.shard, *clock_out, "", path, sizeof(path));
        if (refused[0])
            util_warn("resuming from %s (clock %" PRId64
                      "), the checkpoint before the refused %s",
                      path, *clock_out, refused);
        else
            util_info("resuming from %s (clock %" PRId64 ")", path, *clock_out);
    } else if (n > 0) {
        util_warn("%s holds checkpoints of shard %u but none complete for "
                  "all %u shards: starting from the initial model",
                  c->dir, c->shape.shard, c->shape.nshards);
    }
    util_free(clocks);
    return STRATA_OK;
}
