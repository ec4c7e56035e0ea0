/* The engine's allocator on jemalloc, and arenas backed by announced chunks. */
#include "util/alloc.h"

#include <errno.h>
#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util/log.h"

/* Sanitizer builds keep ordinary allocations in libc, where ASan and TSan see
 * them: jemalloc's memory is invisible to both. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UTIL_ALLOC_LIBC 1
#else
#define UTIL_ALLOC_LIBC 0
#endif

#define UTIL_ARENA_CHUNK_ALIGN (2u << 20)

void *util_malloc(size_t size)
{
    if (UTIL_ALLOC_LIBC)
        return malloc(size ? size : 1);
    return mallocx(size ? size : 1, 0);
}

void *util_calloc(size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        return NULL;
    size_t bytes = count * size;
    if (bytes == 0)
        bytes = 1;
    if (UTIL_ALLOC_LIBC)
        return calloc(1, bytes);
    return mallocx(bytes, MALLOCX_ZERO);
}

void *util_realloc(void *ptr, size_t size)
{
    if (UTIL_ALLOC_LIBC)
        return realloc(ptr, size ? size : 1);
    if (!ptr)
        return util_malloc(size);
    return rallocx(ptr, size ? size : 1, 0);
}

void *util_aligned_alloc(size_t align, size_t size)
{
    if (align == 0 || (align & (align - 1)))
        return NULL;
    if (UTIL_ALLOC_LIBC) {
        void *p = NULL;
        return posix_memalign(&p,
                              align < sizeof(void *) ? sizeof(void *) : align,
                              size ? size : 1)
                   ? NULL
                   : p;
    }
    return mallocx(size ? size : 1, MALLOCX_ALIGN(align));
}

void util_free(void *ptr)
{
    if (!ptr)
        return;
    if (UTIL_ALLOC_LIBC)
        free(ptr);
    else
        dallocx(ptr, 0);
}

char *util_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = util_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* ---- arenas ---------------------------------------------------------------
 * jemalloc asks the extent hooks for memory; we carve it from large chunks,
 * each announced once to chunk_added. Freed extents are retained by jemalloc
 * (dalloc opts out), so a chunk is never partly unmapped, and extents are only
 * merged inside one chunk, since each chunk is registered separately. */

typedef struct util_arena_chunk {
    struct util_arena_chunk *next;
    char *base;
    size_t len;
    size_t used;
} util_arena_chunk_t;

struct util_arena {
    extent_hooks_t ops; /* first: jemalloc hands this pointer to the hooks */
    util_arena_hooks_t hooks;
    unsigned index;
    size_t chunk_bytes;
    pthread_mutex_t lock; /* chunk list; hooks run only when extents grow */
    util_arena_chunk_t *chunks;
};

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

static util_arena_chunk_t *util_arena_map_chunk(util_arena_t *a, size_t need)
{
    size_t len = need > a->chunk_bytes ? need : a->chunk_bytes;
    len = (len + UTIL_ARENA_CHUNK_ALIGN - 1) &
          ~(size_t)(UTIL_ARENA_CHUNK_ALIGN - 1);
    util_arena_chunk_t *c = util_malloc(sizeof(*c));
    if (!c)
        return NULL;
    c->base = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (c->base == MAP_FAILED) {
        util_error("alloc: arena %u: mmap of %zu bytes failed: %s", a->index,
                   len, strerror(errno));
        goto free_chunk;
    }
    c->len = len;
    c->used = 0;
    if (a->hooks.chunk_added &&
        a->hooks.chunk_added(a->hooks.ctx, c->base, len) != STRATA_OK)
        goto unmap; /* the hook logged why */
    c->next = a->chunks;
    a->chunks = c;
    return c;

unmap:
    munmap(c->base, len);
free_chunk:
    util_free(c);
    return NULL;
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
        util_arena_chunk_t *c = util_arena_map_chunk(a, size + alignment);
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

strata_status_t util_arena_create(const util_arena_hooks_t *hooks,
                                  size_t chunk_bytes, util_arena_t **arena_out)
{
    util_arena_t *a = util_calloc(1, sizeof(*a));
    if (!a) {
        util_error("alloc: out of memory creating an arena");
        return STRATA_ERR_NOMEM;
    }
    a->ops = (extent_hooks_t){
        .alloc = util_arena_extent_alloc,
        .dalloc = util_arena_extent_dalloc,
        .destroy = util_arena_extent_destroy,
        .commit = util_arena_extent_commit,
        .split = util_arena_extent_split,
        .merge = util_arena_extent_merge,
    };
    if (hooks)
        a->hooks = *hooks;
    a->chunk_bytes = chunk_bytes ? chunk_bytes : UTIL_ARENA_CHUNK_ALIGN;
    pthread_mutex_init(&a->lock, NULL);

    extent_hooks_t *ops = &a->ops;
    size_t sz = sizeof(a->index);
    int err = mallctl("arenas.create", &a->index, &sz, &ops, sizeof(ops));
    if (err) {
        util_error("alloc: jemalloc arenas.create failed: %s (the chunk hook "
                   "refused memory for the arena's metadata?)",
                   strerror(err));
        pthread_mutex_destroy(&a->lock);
        util_free(a);
        return STRATA_ERR_NOMEM;
    }
    *arena_out = a;
    return STRATA_OK;
}

void *util_arena_alloc(util_arena_t *arena, size_t align, size_t size)
{
    if (align == 0 || (align & (align - 1)))
        return NULL;
    return mallocx(size ? size : 1, MALLOCX_ARENA(arena->index) |
                                        MALLOCX_ALIGN(align) |
                                        MALLOCX_TCACHE_NONE);
}

void util_arena_free(util_arena_t *arena, void *ptr)
{
    (void)arena;
    if (ptr)
        dallocx(ptr, MALLOCX_TCACHE_NONE);
}

void util_arena_destroy(util_arena_t *arena)
{
    if (!arena)
        return;
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "arena.%u.destroy", arena->index);
    int err = mallctl(cmd, NULL, NULL, NULL, 0);
    if (err) /* the chunks are still released below */
        util_warn("alloc: jemalloc %s failed: %s", cmd, strerror(err));
    for (util_arena_chunk_t *c = arena->chunks, *next; c; c = next) {
        next = c->next;
        if (arena->hooks.chunk_removed)
            arena->hooks.chunk_removed(arena->hooks.ctx, c->base, c->len);
        munmap(c->base, c->len);
        util_free(c);
    }
    pthread_mutex_destroy(&arena->lock);
    util_free(arena);
}
