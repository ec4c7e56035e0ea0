/* The allocator and arenas whose chunks are announced to hooks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/alloc.h"

#define MAX_CHUNKS 64

typedef struct chunks {
    int added, removed;
    int limit; /* refuse chunks beyond this many (0: no limit) */
    struct {
        char *addr;
        size_t len;
        int live;
    } c[MAX_CHUNKS];
} chunks_t;

static strata_status_t chunk_added(void *ctx, void *addr, size_t len)
{
    chunks_t *ch = ctx;
    if ((ch->limit < 0 || (ch->limit && ch->added >= ch->limit)) ||
        ch->added == MAX_CHUNKS)
        return STRATA_ERR_NO_DEVICE;
    ch->c[ch->added].addr = addr;
    ch->c[ch->added].len = len;
    ch->c[ch->added].live = 1;
    ch->added++;
    return STRATA_OK;
}

static void chunk_removed(void *ctx, void *addr, size_t len)
{
    chunks_t *ch = ctx;
    for (int i = 0; i < ch->added; i++)
        if (ch->c[i].addr == addr && ch->c[i].len == len && ch->c[i].live) {
            ch->c[i].live = 0;
            ch->removed++;
            return;
        }
    fail_msg("chunk_removed for a chunk never added: %p+%zu", addr, len);
}

/* The whole of [p, p+len) lies inside one announced, live chunk. */
static int inside_one_chunk(const chunks_t *ch, const void *p, size_t len)
{
    const char *b = p;
    for (int i = 0; i < ch->added; i++)
        if (ch->c[i].live && b >= ch->c[i].addr &&
            b + len <= ch->c[i].addr + ch->c[i].len)
            return 1;
    return 0;
}

static void plain_allocations(void **state)
{
    (void)state;
    char *p = util_malloc(100);
    assert_non_null(p);
    memset(p, 1, 100);
    p = util_realloc(p, 100000);
    assert_non_null(p);
    assert_int_equal(p[99], 1);
    util_free(p);

    uint8_t *z = util_calloc(1000, 8);
    assert_non_null(z);
    for (int i = 0; i < 8000; i++)
        assert_int_equal(z[i], 0);
    util_free(z);

    void *a = util_aligned_alloc(4096, 10);
    assert_non_null(a);
    assert_int_equal((uintptr_t)a % 4096, 0);
    util_free(a);
    assert_null(util_aligned_alloc(3, 10));
    assert_null(util_calloc(SIZE_MAX / 2, 4)); /* overflow, not wrap */

    void *zero = util_malloc(0);
    assert_non_null(zero);
    util_free(zero);
    util_free(NULL);

    char *d = util_strdup("strata");
    assert_string_equal(d, "strata");
    util_free(d);
}

static void jemalloc_arena_packs_allocations_into_chunks(void **state)
{
    (void)state;
    chunks_t ch = {0};
    util_arena_hooks_t hooks = {chunk_added, chunk_removed, &ch};
    util_arena_t *arena;
    /* This test program links jemalloc, as the tools do: AUTO picks it. */
    assert_int_equal(
        util_arena_create(UTIL_ARENA_AUTO, &hooks, 4u << 20, &arena),
        STRATA_OK);
    assert_string_equal(util_arena_kind_name(arena), "jemalloc");

    enum { N = 200 };
    void *ptrs[N];
    size_t sizes[N];
    for (int i = 0; i < N; i++) {
        sizes[i] = (size_t)(i % 7 == 0 ? 300000 : 64 + 37 * i);
        ptrs[i] = util_arena_alloc(arena, 64, sizes[i]);
        assert_non_null(ptrs[i]);
        assert_int_equal((uintptr_t)ptrs[i] % 64, 0);
        memset(ptrs[i], (int)i, sizes[i]);
        assert_true(inside_one_chunk(&ch, ptrs[i], sizes[i]));
    }
    /* Few, large registrations: not one per allocation. */
    assert_true(ch.added >= 1 && ch.added <= 4);
    for (int i = 0; i < N; i += 2)
        util_arena_free(arena, ptrs[i]);
    void *again = util_arena_alloc(arena, 4096, 1u << 20);
    assert_non_null(again);
    assert_true(inside_one_chunk(&ch, again, 1u << 20));

    /* Larger than a chunk: a chunk of its own. */
    void *huge = util_arena_alloc(arena, 64, 40u << 20);
    assert_non_null(huge);
    assert_true(inside_one_chunk(&ch, huge, 40u << 20));

    int added = ch.added;
    util_arena_destroy(arena);
    assert_int_equal(ch.removed, added);
}

static void jemalloc_arena_refused_chunk_fails_the_allocation(void **state)
{
    (void)state;
    chunks_t ch = {.limit = 1};
    util_arena_hooks_t hooks = {chunk_added, chunk_removed, &ch};
    util_arena_t *arena;
    assert_int_equal(util_arena_create(UTIL_ARENA_JEMALLOC, &hooks, 0, &arena),
                     STRATA_OK);
    assert_non_null(util_arena_alloc(arena, 64, 1000));  /* first chunk */
    assert_null(util_arena_alloc(arena, 64, 64u << 20)); /* needs another */
    util_arena_destroy(arena);
    assert_int_equal(ch.removed, ch.added);

    /* jemalloc's own metadata comes from the first chunk: refusing it
     * fails the creation, cleanly. */
    chunks_t none = {.limit = -1};
    hooks.ctx = &none;
    assert_int_equal(util_arena_create(UTIL_ARENA_JEMALLOC, &hooks, 0, &arena),
                     STRATA_ERR_NOMEM);
    assert_int_equal(none.added, 0);
}

/* Without jemalloc (libstrata dlopen'ed into Python): a chunk per
 * allocation, whole pages, aligned as asked, unmapped when freed. */
static void pages_arena_maps_each_allocation(void **state)
{
    (void)state;
    chunks_t ch = {0};
    util_arena_hooks_t hooks = {chunk_added, chunk_removed, &ch};
    util_arena_t *arena;
    assert_int_equal(util_arena_create(UTIL_ARENA_PAGES, &hooks, 0, &arena),
                     STRATA_OK);
    assert_string_equal(util_arena_kind_name(arena), "pages");
    static const size_t sizes[] = {1, 100, 4096, 4097, 300000, 40u << 20};
    static const size_t aligns[] = {64, 4096, 64, 1u << 16, 4096, 2u << 20};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    void *ptrs[N];
    for (int i = 0; i < N; i++) {
        ptrs[i] = util_arena_alloc(arena, aligns[i], sizes[i]);
        assert_non_null(ptrs[i]);
        assert_int_equal((uintptr_t)ptrs[i] % aligns[i], 0);
        memset(ptrs[i], i + 1, sizes[i]);
        assert_true(inside_one_chunk(&ch, ptrs[i], sizes[i]));
        assert_int_equal(ch.added, i + 1);
        assert_int_equal(ch.c[i].len % 4096, 0);
    }
    util_arena_free(arena, ptrs[2]);
    assert_int_equal(ch.removed, 1);
    assert_false(ch.c[2].live);
    assert_int_equal(((unsigned char *)ptrs[3])[4096], 4); /* others intact */

    chunks_t refuse = {.limit = -1};
    util_arena_t *refusing;
    hooks.ctx = &refuse;
    assert_int_equal(util_arena_create(UTIL_ARENA_PAGES, &hooks, 0, &refusing),
                     STRATA_OK);
    assert_null(util_arena_alloc(refusing, 64, 100));
    util_arena_destroy(refusing);

    util_arena_destroy(arena); /* the rest */
    assert_int_equal(ch.removed, N);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plain_allocations),
        cmocka_unit_test(jemalloc_arena_packs_allocations_into_chunks),
        cmocka_unit_test(jemalloc_arena_refused_chunk_fails_the_allocation),
        cmocka_unit_test(pages_arena_maps_each_allocation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
