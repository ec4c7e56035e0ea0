/* The ring of fixed-size elements the engine's write queues are. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "util/ring.h"

typedef struct item {
    uint32_t v;
    int64_t pad; /* an element larger than a word */
} item_t;

static void push_v(util_ring_t *r, uint32_t v)
{
    item_t *e = util_ring_push(r);
    assert_non_null(e);
    *e = (item_t){.v = v, .pad = -(int64_t)v};
}

static uint32_t pop_v(util_ring_t *r)
{
    const item_t *e = util_ring_peek(r);
    assert_non_null(e);
    assert_int_equal(e->pad, -(int64_t)e->v);
    uint32_t v = e->v;
    util_ring_pop(r);
    return v;
}

static void ring_rounds_up_and_fills(void **state)
{
    (void)state;
    util_ring_t r;
    assert_int_equal(util_ring_init(&r, sizeof(item_t), 5), STRATA_OK);
    assert_int_equal(util_ring_cap(&r), 8);
    assert_int_equal(util_ring_len(&r), 0);
    assert_null(util_ring_peek(&r));
    util_ring_pop(&r); /* empty: nothing happens */
    assert_int_equal(util_ring_len(&r), 0);
    for (uint32_t v = 0; v < 8; v++) {
        assert_false(util_ring_full(&r));
        push_v(&r, v);
    }
    assert_true(util_ring_full(&r));
    assert_null(util_ring_push(&r));
    assert_int_equal(util_ring_len(&r), 8);
    for (uint32_t v = 0; v < 8; v++)
        assert_int_equal(pop_v(&r), v);
    assert_null(util_ring_peek(&r));
    util_ring_fini(&r);
    assert_int_equal(util_ring_cap(&r), 0);
    assert_true(util_ring_full(&r));
    assert_null(util_ring_push(&r));
}

/* Many times round the buffer: at(i) counts from the head across the
 * wrap, and the order holds. */
static void ring_wraps_in_order(void **state)
{
    (void)state;
    util_ring_t r;
    assert_int_equal(util_ring_init(&r, sizeof(item_t), 4), STRATA_OK);
    uint32_t next = 0, oldest = 0;
    for (int step = 0; step < 100; step++) {
        while (util_ring_len(&r) < 3)
            push_v(&r, next++);
        for (uint32_t i = 0; i < util_ring_len(&r); i++)
            assert_int_equal(((item_t *)util_ring_at(&r, i))->v, oldest + i);
        for (int k = 0; k < 1 + step % 3 && util_ring_len(&r); k++)
            assert_int_equal(pop_v(&r), oldest++);
    }
    assert_true(next > 10 * util_ring_cap(&r)); /* round many times */
    util_ring_fini(&r);
}

/* A ring grown while it wraps keeps its elements in order, and one that
 * already has the room is left alone. */
static void ring_reserve_keeps_order(void **state)
{
    (void)state;
    util_ring_t r;
    assert_int_equal(util_ring_init(&r, sizeof(item_t), 4), STRATA_OK);
    for (uint32_t v = 0; v < 4; v++)
        push_v(&r, v);
    assert_int_equal(pop_v(&r), 0);
    assert_int_equal(pop_v(&r), 1);
    push_v(&r, 4);
    push_v(&r, 5); /* 2 3 | 4 5 wrapped to the start */
    assert_int_equal(r.head, 2);
    void *buf = r.buf;
    assert_int_equal(util_ring_reserve(&r, 3), STRATA_OK);
    assert_ptr_equal(r.buf, buf);
    assert_int_equal(util_ring_reserve(&r, 7), STRATA_OK);
    assert_int_equal(util_ring_cap(&r), 8);
    assert_int_equal(util_ring_len(&r), 4);
    for (uint32_t v = 6; v < 10; v++)
        push_v(&r, v);
    assert_true(util_ring_full(&r));
    for (uint32_t v = 2; v < 10; v++)
        assert_int_equal(pop_v(&r), v);
    assert_int_equal(util_ring_reserve(&r, UINT32_MAX), STRATA_ERR_RANGE);
    assert_int_equal(util_ring_cap(&r), 8);
    util_ring_fini(&r);
    /* a ring zeroed or finished is reserved from nothing */
    assert_int_equal(util_ring_reserve(&r, 1), STRATA_OK);
    assert_int_equal(util_ring_cap(&r), 1);
    push_v(&r, 7);
    assert_true(util_ring_full(&r));
    assert_int_equal(pop_v(&r), 7);
    util_ring_fini(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ring_rounds_up_and_fills),
        cmocka_unit_test(ring_wraps_in_order),
        cmocka_unit_test(ring_reserve_keeps_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
