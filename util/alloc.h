/*
 * Allocation. Ordinary allocations come from the C library. An util_arena_t
 * hands out memory from chunks announced to hooks (the verbs provider
 * registers each chunk with the NIC once, so every allocation from the arena
 * is already registered).
 *
 * An arena runs on jemalloc when the process has jemalloc 5 loaded (linked
 * by the program, as Strata's tools are, or preloaded): a jemalloc arena
 * whose extents come from large chunks, so many allocations share few
 * registrations and freed memory is reused without registering again. Else
 * (libstrata dlopen'ed into Python, say) every allocation is a chunk of its
 * own, whole pages. libstrata never loads jemalloc itself: Debian's build
 * needs initial-exec TLS, which only a program's start-up can give, and it
 * exports operator new/delete. docs/engine.md, "Memory", says why.
 */
#ifndef STRATA_UTIL_ALLOC_H
#define STRATA_UTIL_ALLOC_H

#include <stddef.h>

#include <strata/strata.h>

/* malloc-like; NULL on failure (not logged: the caller knows what failed).
 * A size of 0 returns a unique pointer. */
void *util_malloc(size_t size);
void *util_calloc(size_t count, size_t size);
void *util_realloc(void *ptr, size_t size);
/* align: a power of two. */
void *util_aligned_alloc(size_t align, size_t size);
void util_free(void *ptr);
char *util_strdup(const char *s);

/* Told about every chunk an arena maps and unmaps. chunk_added may refuse a
 * chunk (e.g. registration failed): the allocation that needed it fails. */
typedef struct util_arena_hooks {
    strata_status_t (*chunk_added)(void *ctx, void *addr, size_t len);
    void (*chunk_removed)(void *ctx, void *addr, size_t len);
    void *ctx;
} util_arena_hooks_t;

typedef struct util_arena util_arena_t;

/* How an arena allocates: UTIL_ARENA_AUTO picks jemalloc when the process
 * has it, else pages; the others force one (tests). */
typedef enum util_arena_kind {
    UTIL_ARENA_AUTO,
    UTIL_ARENA_JEMALLOC,
    UTIL_ARENA_PAGES,
} util_arena_kind_t;

/* chunk_bytes: with jemalloc, the least mapped at a time (rounded up to
 * 2 MiB), so that few, large chunks are registered. hooks may be NULL (plain
 * mmap'd memory). STRATA_ERR_UNSUPPORTED: UTIL_ARENA_JEMALLOC without
 * jemalloc in the process. */
strata_status_t util_arena_create(util_arena_kind_t kind,
                                  const util_arena_hooks_t *hooks,
                                  size_t chunk_bytes, util_arena_t **arena_out);
/* "jemalloc" or "pages". */
const char *util_arena_kind_name(const util_arena_t *arena);
void *util_arena_alloc(util_arena_t *arena, size_t align, size_t size);
void util_arena_free(util_arena_t *arena, void *ptr);
/* Frees everything still allocated and unmaps every chunk (chunk_removed is
 * called for each). */
void util_arena_destroy(util_arena_t *arena);

#endif /* STRATA_UTIL_ALLOC_H */
