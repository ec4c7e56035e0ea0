/* Arenas on the jemalloc the program loaded (linked or preloaded).
 *
 * jemalloc asks the extent hooks for memory; we carve it from large chunks,
 * each announced once to chunk_added. Freed extents are retained by jemalloc
 * (dalloc opts out), so a chunk is never partly unmapped, and extents are only
 * merged inside one chunk, since each chunk is registered separately.
 *
 * jemalloc is found with dlsym, never loaded: Debian's libjemalloc.so.2 uses
 * initial-exec TLS (2.6 KB, more than glibc keeps for libraries opened later)
 * and exports operator new/delete, so loading it from a library fails in a
 * running Python and breaks C++ libraries loaded after it. */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/arena.h"
#include "util/log.h"

/* jemalloc's entry points, as the process has them (NULL: not loaded). */
static struct {
    int (*ctl)(const char *name, void *oldp, size_t *oldlenp, void *newp,
               size_t newlen);
    void *(*alloc)(size_t size, int flags);
    void (*dalloc)(void *ptr, int flags);
} util_je;
static pthread_once_t util_je_once = PTHREAD_ONCE_INIT;

static void *util_je_sym(const char *name)
{
    return dlsym(RTLD_DEFAULT, name);
}

static void util_je_find(void)
{
    /* Function pointers from dlsym's void *, as POSIX allows. */
    void *ctl = util_je_sym("mallctl"), *alloc = util_je_sym("mallocx");
    void *dalloc = util_je_sym("dallocx");
    if (!ctl || !alloc || !dalloc)
        return;
    memcpy(&util_je.ctl, &ctl, sizeof(ctl));
    const char *version = NULL;
    size_t sz = sizeof(version);
    /* Extent hooks are jemalloc 5's (4 had chunk hooks). */
    if (util_je.ctl("version", &version, &sz, NULL, 0) != 0 || !version ||
        strncmp(version, "5.", 2) != 0) {
        util_debug("alloc: the process's jemalloc is %s, not 5.x: arenas "
                   "use pages",
                   version ? version : "of unknown version");
        util_je.ctl = NULL;
        return;
    }
    memcpy(&util_je.alloc, &alloc, sizeof(alloc));
    memcpy(&util_je.dalloc, &dalloc, sizeof(dalloc));
}

bool util_arena_jemalloc_present(void)
{
    pthread_once(&util_je_once, util_je_find);
    return util_je.alloc != NULL;
}

static util_arena_t *util_arena_of(extent_hooks_t *ops)
{
    return (util_arena_t *)ops;
}

static void *util_arena_carve(util_arena_chunk_t *c, size_t size, size_t align)
{
    uintptr_t start = ((uintptr_t)c->base + c->used + align - 1) & ~(align - 1);
    if (start + size > (uintptr_t)c->base + c->len)
        return NULL;
    c->used = start + size - (uintptr_t)c->base;
    return (void *)start;
}

static void *util_arena_extent_alloc(extent_hooks_t *ops, void *new_addr,
                                     size_t size, size_t alignment, bool *zero,
                                     bool *commit, unsigned arena_ind)
{
    (void)arena_ind;
    if (new_addr)
        return NULL; /* growing in place would cross chunk boundaries */
    util_arena_t *a = util_arena_of(ops);
    void *p = NULL;
    pthread_mutex_lock(&a->lock);
    for (util_arena_chunk_t *c = a->chunks; c && !p; c = c->next)
        p = util_arena_carve(c, size, alignment);
    if (!p) {
        size_t need = size + alignment;
        size_t len = need > a->chunk_bytes ? need : a->chunk_bytes;
        len = (len + UTIL_ARENA_CHUNK_ALIGN - 1) &
              ~(size_t)(UTIL_ARENA_CHUNK_ALIGN - 1);
        util_arena_chunk_t *c = util_arena_map_chunk(a, len, 0);
        if (c)
            p = util_arena_carve(c, size, alignment);
    }
    pthread_mutex_unlock(&a->lock);
    /* Carved memory was never handed out before: fresh mmap pages. */
    *zero = true;
    *commit = true;
    return p;
}

static bool util_arena_extent_dalloc(extent_hooks_t *ops, void *addr,
                                     size_t size, bool committed,
                                     unsigned arena_ind)
{
    (void)ops, (void)addr, (void)size, (void)committed, (void)arena_ind;
    return true; /* opt out: jemalloc keeps the extent for reuse */
}

static void util_arena_extent_destroy(extent_hooks_t *ops, void *addr,
                                      size_t size, bool committed,
                                      unsigned arena_ind)
{
    /* Chunks are unmapped as a whole by util_arena_destroy. */
    (void)ops, (void)addr, (void)size, (void)committed, (void)arena_ind;
}

static bool util_arena_extent_commit(extent_hooks_t *ops, void *addr,
                                     size_t size, size_t offset, size_t length,
                                     unsigned arena_ind)
{
    (void)ops, (void)addr, (void)size, (void)offset, (void)length;
    (void)arena_ind;
    return false; /* always committed: registered memory stays resident */
}

static bool util_arena_extent_split(extent_hooks_t *ops, void *addr,
                                    size_t size, size_t size_a, size_t size_b,
                                    bool committed, unsigned arena_ind)
{
    (void)ops, (void)addr, (void)size, (void)size_a, (void)size_b;
    (void)committed, (void)arena_ind;
    return false; /* splitting is bookkeeping only */
}

static bool util_arena_extent_merge(extent_hooks_t *ops, void *addr_a,
                                    size_t size_a, void *addr_b, size_t size_b,
                                    bool committed, unsigned arena_ind)
{
    (void)size_a, (void)committed, (void)arena_ind;
    util_arena_t *a = util_arena_of(ops);
    bool same_chunk = false;
    pthread_mutex_lock(&a->lock);
    for (util_arena_chunk_t *c = a->chunks; c; c = c->next) {
        char *lo = c->base, *hi = c->base + c->len;
        if ((char *)addr_a >= lo && (char *)addr_a < hi) {
            same_chunk = (char *)addr_b >= lo && (char *)addr_b + size_b <= hi;
            break;
        }
    }
    pthread_mutex_unlock(&a->lock);
    return !same_chunk; /* false means merged */
}

static strata_status_t util_arena_je_init(util_arena_t *a)
{
    a->extent_ops = (extent_hooks_t){
        .alloc = util_arena_extent_alloc,
        .dalloc = util_arena_extent_dalloc,
        .destroy = util_arena_extent_destroy,
        .commit = util_arena_extent_commit,
        .split = util_arena_extent_split,
        .merge = util_arena_extent_merge,
    };
    extent_hooks_t *ops = &a->extent_ops;
    size_t sz = sizeof(a->index);
    int err = util_je.ctl("arenas.create", &a->index, &sz, &ops, sizeof(ops));
    if (err) {
        util_error("alloc: jemalloc arenas.create failed: %s (the chunk hook "
                   "refused memory for the arena's metadata?)",
                   strerror(err));
        return STRATA_ERR_NOMEM;
    }
    return STRATA_OK;
}

static void *util_arena_je_alloc(util_arena_t *a, size_t align, size_t size)
{
    return util_je.alloc(size, MALLOCX_ARENA(a->index) | MALLOCX_ALIGN(align) |
                                   MALLOCX_TCACHE_NONE);
}

static void util_arena_je_free(util_arena_t *a, void *ptr)
{
    (void)a;
    util_je.dalloc(ptr, MALLOCX_TCACHE_NONE);
}

static void util_arena_je_fini(util_arena_t *a)
{
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "arena.%u.destroy", a->index);
    int err = util_je.ctl(cmd, NULL, NULL, NULL, 0);
    if (err) /* the chunks are still released */
        util_warn("alloc: jemalloc %s failed: %s", cmd, strerror(err));
}

const util_arena_ops_t util_arena_jemalloc_ops = {
    .name = "jemalloc",
    .init = util_arena_je_init,
    .alloc = util_arena_je_alloc,
    .free = util_arena_je_free,
    .fini = util_arena_je_fini,
};
