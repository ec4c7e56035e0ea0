/* The key map and the byte FIFO the providers keep their state in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "util/bfifo.h"
#include "util/keymap.h"

/* Random puts and deletes against a plain array as the reference,
 * including the probe runs backward-shift deletion must repair. */
static void keymap_matches_a_reference(void **state)
{
    (void)state;
    enum { N = 4096 };
    static void *ref[N];
    util_keymap_t m;
    util_keymap_init(&m);
    srand(7);
    for (int step = 0; step < 200000; step++) {
        uint64_t k = 1 + (uint64_t)(rand() % (N - 1));
        if (rand() % 3) {
            void *v = (void *)(uintptr_t)(step + 1);
            assert_int_equal(util_keymap_put(&m, k, v), STRATA_OK);
            ref[k] = v;
        } else {
            assert_ptr_equal(util_keymap_del(&m, k), ref[k]);
            ref[k] = NULL;
        }
        if (step % 1000 == 0)
            for (uint64_t j = 1; j < N; j++)
                assert_ptr_equal(util_keymap_get(&m, j), ref[j]);
    }
    uint32_t n = 0, live = 0;
    uint64_t key;
    void *val;
    for (uint32_t it = 0; util_keymap_next(&m, &it, &key, &val);) {
        assert_ptr_equal(ref[key], val);
        n++;
    }
    for (int j = 1; j < N; j++)
        live += ref[j] != NULL;
    assert_int_equal(n, live);
    assert_int_equal(m.n, live);
    assert_int_equal(util_keymap_put(&m, 0, &m), STRATA_ERR_INVALID);
    assert_null(util_keymap_get(&m, 0));
    util_keymap_fini(&m);
    assert_null(util_keymap_get(&m, 1));
}

static void bfifo_hands_out_contiguous_pieces(void **state)
{
    (void)state;
    uint8_t buf[64];
    util_bfifo_t f = {.buf = buf, .cap = 64};
    uint64_t e1, e2, e3, e4;
    uint8_t *a = util_bfifo_alloc(&f, 40, &e1);
    assert_ptr_equal(a, buf);
    assert_null(util_bfifo_alloc(&f, 30, &e2)); /* 24 left, not 30 */
    uint8_t *b = util_bfifo_alloc(&f, 20, &e2);
    assert_ptr_equal(b, buf + 40);
    util_bfifo_release(&f, e1);
    /* 4 bytes at the end are skipped: the piece wraps to the start. */
    uint8_t *c = util_bfifo_alloc(&f, 30, &e3);
    assert_ptr_equal(c, buf);
    assert_null(util_bfifo_alloc(&f, 20, &e4));
    util_bfifo_release(&f, e2);
    util_bfifo_release(&f, e3);
    assert_int_equal(f.head, f.tail);
    assert_null(util_bfifo_alloc(&f, 65, &e4));
    assert_non_null(util_bfifo_alloc(&f, 64, &e4));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(keymap_matches_a_reference),
        cmocka_unit_test(bfifo_hands_out_contiguous_pieces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
