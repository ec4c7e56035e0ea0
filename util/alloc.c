/* Ordinary allocations from the C library; arenas of announced chunks. */
#include "util/alloc.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/arena.h"
#include "util/log.h"

void *util_malloc(size_t size)
{
    return malloc(size ? size : 1);
}

void *util_calloc(size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        return NULL;
    size_t bytes = count * size;
    return calloc(1, bytes ? bytes : 1);
}

void *util_realloc(void *ptr, size_t size)
{
    return realloc(ptr, size ? size : 1);
}

void *util_aligned_alloc(size_t align, size_t size)
{
    if (align == 0 || (align & (align - 1)))
        return NULL;
    void *p = NULL;
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align,
                       size ? size : 1))
        return NULL;
    return p;
}

void util_free(void *ptr)
{
    free(ptr);
}

char *util_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = util_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* ---- arenas ---- */

util_arena_chunk_t *util_arena_map_chunk(util_arena_t *a, size_t len,
                                         size_t align)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    len = (len + page - 1) & ~(page - 1);
    size_t extra = align > page ? align : 0; /* to trim to the alignment */
    util_arena_chunk_t *c = util_malloc(sizeof(*c));
    if (!c)
        return NULL;
    char *map = mmap(NULL, len + extra, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        util_error("alloc: %s arena: mmap of %zu bytes failed: %s",
                   a->ops->name, len + extra, strerror(errno));
        goto free_chunk;
    }
    c->base = map;
    if (extra) {
        c->base = (char *)(((uintptr_t)map + align - 1) & ~(align - 1));
        if (c->base > map)
            munmap(map, (size_t)(c->base - map));
        size_t tail = extra - (size_t)(c->base - map);
        if (tail)
            munmap(c->base + len, tail);
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

static void util_arena_unmap_chunk(util_arena_t *a, util_arena_chunk_t *c)
{
    if (a->hooks.chunk_removed)
        a->hooks.chunk_removed(a->hooks.ctx, c->base, c->len);
    munmap(c->base, c->len);
    util_free(c);
}

strata_status_t util_arena_create(util_arena_kind_t kind,
                                  const util_arena_hooks_t *hooks,
                                  size_t chunk_bytes, util_arena_t **arena_out)
{
    bool je = util_arena_jemalloc_present();
    if (kind == UTIL_ARENA_JEMALLOC && !je) {
        util_error("alloc: a jemalloc arena needs jemalloc 5 loaded in the "
                   "process (link the program with -ljemalloc)");
        return STRATA_ERR_UNSUPPORTED;
    }
    util_arena_t *a = util_calloc(1, sizeof(*a));
    if (!a) {
        util_error("alloc: out of memory creating an arena");
        return STRATA_ERR_NOMEM;
    }
    a->ops = kind == UTIL_ARENA_PAGES || !je ? &util_arena_pages_ops
                                             : &util_arena_jemalloc_ops;
    if (hooks)
        a->hooks = *hooks;
    a->chunk_bytes = chunk_bytes ? chunk_bytes : UTIL_ARENA_CHUNK_ALIGN;
    pthread_mutex_init(&a->lock, NULL);
    strata_status_t st = a->ops->init(a);
    if (st != STRATA_OK) {
        pthread_mutex_destroy(&a->lock);
        util_free(a);
        return st;
    }
    util_debug("alloc: a %s arena", a->ops->name);
    *arena_out = a;
    return STRATA_OK;
}

const char *util_arena_kind_name(const util_arena_t *arena)
{
    return arena->ops->name;
}

void *util_arena_alloc(util_arena_t *arena, size_t align, size_t size)
{
    if (align == 0 || (align & (align - 1)))
        return NULL;
    return arena->ops->alloc(arena, align, size ? size : 1);
}

void util_arena_free(util_arena_t *arena, void *ptr)
{
    if (ptr)
        arena->ops->free(arena, ptr);
}

void util_arena_destroy(util_arena_t *arena)
{
    if (!arena)
        return;
    arena->ops->fini(arena);
    for (util_arena_chunk_t *c = arena->chunks, *next; c; c = next) {
        next = c->next;
        util_arena_unmap_chunk(arena, c);
    }
    pthread_mutex_destroy(&arena->lock);
    util_free(arena);
}

/* ---- pages: every allocation a chunk of its own ----
 * For processes without jemalloc. Allocations of registered memory are few
 * and made at set-up (endpoint blocks, shard and slot regions), so one
 * mapping and one registration each costs little. */

static strata_status_t util_arena_pages_init(util_arena_t *a)
{
    (void)a;
    return STRATA_OK;
}

static void *util_arena_pages_alloc(util_arena_t *a, size_t align, size_t size)
{
    pthread_mutex_lock(&a->lock);
    util_arena_chunk_t *c = util_arena_map_chunk(a, size, align);
    pthread_mutex_unlock(&a->lock);
    return c ? c->base : NULL;
}

static void util_arena_pages_free(util_arena_t *a, void *ptr)
{
    pthread_mutex_lock(&a->lock);
    util_arena_chunk_t **pp = &a->chunks;
    while (*pp && (*pp)->base != ptr)
        pp = &(*pp)->next;
    util_arena_chunk_t *c = *pp;
    if (c)
        *pp = c->next;
    pthread_mutex_unlock(&a->lock);
    if (!c) {
        util_error("alloc: %p was not allocated from this arena", ptr);
        return;
    }
    util_arena_unmap_chunk(a, c);
}

static void util_arena_pages_fini(util_arena_t *a)
{
    (void)a;
}

const util_arena_ops_t util_arena_pages_ops = {
    .name = "pages",
    .init = util_arena_pages_init,
    .alloc = util_arena_pages_alloc,
    .free = util_arena_pages_free,
    .fini = util_arena_pages_fini,
};
