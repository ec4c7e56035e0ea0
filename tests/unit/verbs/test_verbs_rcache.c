/* The registration cache: sharing, reference counts, access, failures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tests/support/test_log.h"
#include "transport/transport.h"
#include "transport/verbs/verbs_rcache.h"
#include "util/log.h"

#define PAGE 4096u

/* A fake device that records what it registered. */
static struct {
    int regs, deregs, live;
    int fail_next;
    uintptr_t last_addr;
    size_t last_len;
    uint32_t next_key;
} dev;

static strata_status_t fake_reg(void *arg, void *addr, size_t len,
                                unsigned access, tp_verbs_reg_t *reg)
{
    (void)arg, (void)access;
    if (dev.fail_next) {
        dev.fail_next = 0;
        return STRATA_ERR_NOMEM;
    }
    dev.regs++;
    dev.live++;
    dev.last_addr = (uintptr_t)addr;
    dev.last_len = len;
    reg->handle = &dev;
    reg->lkey = ++dev.next_key;
    reg->rkey = 1000 + dev.next_key;
    return STRATA_OK;
}

static void fake_dereg(void *arg, tp_verbs_reg_t *reg)
{
    (void)arg, (void)reg;
    dev.deregs++;
    dev.live--;
}

static tp_verbs_rcache_t rc;

static int setup(void **state)
{
    (void)state;
    memset(&dev, 0, sizeof(dev));
    test_log_start();
    tp_verbs_rcache_ops_t ops = {fake_reg, fake_dereg, NULL};
    tp_verbs_rcache_init(&rc, &ops, PAGE);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_verbs_rcache_fini(&rc);
    test_log_stop();
    return 0;
}

/* Addresses are only looked at, never touched: any page-aligned base. */
static void *at(uintptr_t page, uintptr_t off)
{
    return (void *)(0x10000000u + page * PAGE + off);
}

static tp_verbs_reg_t *get(void *addr, size_t len, unsigned access)
{
    tp_verbs_reg_t *r = NULL;
    assert_int_equal(tp_verbs_rcache_get(&rc, addr, len, access, &r),
                     STRATA_OK);
    return r;
}

static void registers_whole_pages(void **state)
{
    (void)state;
    tp_verbs_reg_t *r = get(at(2, 100), 5000, TP_ACCESS_LOCAL);
    assert_int_equal(dev.regs, 1);
    assert_int_equal(dev.last_addr, (uintptr_t)at(2, 0));
    assert_int_equal(dev.last_len, 2 * PAGE); /* 100..5100 spans 2 pages */
    assert_int_equal(r->refs, 1);
    tp_verbs_rcache_put(&rc, r);
    assert_int_equal(dev.live, 0);
}

static void contained_ranges_share(void **state)
{
    (void)state;
    tp_verbs_reg_t *big = get(at(0, 0), 16 * PAGE, TP_ACCESS_LOCAL);
    tp_verbs_reg_t *a = get(at(3, 17), 100, TP_ACCESS_LOCAL);
    tp_verbs_reg_t *b = get(at(15, 0), PAGE, TP_ACCESS_LOCAL);
    assert_ptr_equal(a, big);
    assert_ptr_equal(b, big);
    assert_int_equal(dev.regs, 1);
    assert_int_equal(big->refs, 3);
    /* crossing the end is not contained */
    tp_verbs_reg_t *c = get(at(15, 0), PAGE + 1, TP_ACCESS_LOCAL);
    assert_ptr_not_equal(c, big);
    assert_int_equal(dev.regs, 2);
    tp_verbs_rcache_put(&rc, a);
    tp_verbs_rcache_put(&rc, big);
    assert_int_equal(dev.deregs, 0); /* b still holds it */
    tp_verbs_rcache_put(&rc, b);
    assert_int_equal(dev.deregs, 1);
    /* the released range registers anew: nothing stale is found */
    tp_verbs_reg_t *d = get(at(3, 0), 10, TP_ACCESS_LOCAL);
    assert_int_equal(dev.regs, 3);
    tp_verbs_rcache_put(&rc, c);
    tp_verbs_rcache_put(&rc, d);
    assert_int_equal(dev.live, 0);
}

static void access_must_be_covered(void **state)
{
    (void)state;
    tp_verbs_reg_t *local = get(at(0, 0), 8 * PAGE, TP_ACCESS_LOCAL);
    tp_verbs_reg_t *remote = get(at(1, 0), PAGE, TP_ACCESS_REMOTE_WRITE);
    assert_ptr_not_equal(local, remote);
    assert_int_equal(remote->access, TP_ACCESS_REMOTE_WRITE);
    /* a remote registration serves local requests inside it */
    tp_verbs_reg_t *again = get(at(1, 8), 8, TP_ACCESS_LOCAL);
    assert_true(again == remote || again == local);
    tp_verbs_reg_t *r2 = get(at(1, 8), 8, TP_ACCESS_REMOTE_WRITE);
    assert_ptr_equal(r2, remote);
    assert_int_equal(dev.regs, 2);
    tp_verbs_rcache_put(&rc, again);
    tp_verbs_rcache_put(&rc, r2);
    tp_verbs_rcache_put(&rc, remote);
    tp_verbs_rcache_put(&rc, local);
    assert_int_equal(dev.live, 0);
}

static void many_entries_stay_sorted(void **state)
{
    (void)state;
    enum { N = 100 };
    tp_verbs_reg_t *regs[N];
    /* registered in a scrambled order, found again by any inner address */
    for (int i = 0; i < N; i++) {
        int page = (i * 37) % N;
        regs[page] = get(at((uintptr_t)page * 4, 0), 2 * PAGE, TP_ACCESS_LOCAL);
    }
    assert_int_equal(dev.regs, N);
    for (int page = 0; page < N; page++) {
        tp_verbs_reg_t *r = tp_verbs_rcache_lookup(
            &rc, at((uintptr_t)page * 4, 5), 10, TP_ACCESS_LOCAL);
        assert_ptr_equal(r, regs[page]);
    }
    assert_null(tp_verbs_rcache_lookup(&rc, at(2, 0), 1, TP_ACCESS_LOCAL));
    for (int i = 0; i < N; i += 2)
        tp_verbs_rcache_put(&rc, regs[i]);
    for (int i = 1; i < N; i += 2)
        assert_ptr_equal(tp_verbs_rcache_lookup(&rc, at((uintptr_t)i * 4, 0), 1,
                                                TP_ACCESS_LOCAL),
                         regs[i]);
    for (int i = 1; i < N; i += 2)
        tp_verbs_rcache_put(&rc, regs[i]);
    assert_int_equal(dev.live, 0);
}

static void failure_leaves_nothing(void **state)
{
    (void)state;
    tp_verbs_reg_t *r = NULL;
    dev.fail_next = 1;
    assert_int_equal(
        tp_verbs_rcache_get(&rc, at(0, 0), 10, TP_ACCESS_LOCAL, &r),
        STRATA_ERR_NOMEM);
    assert_null(r);
    assert_null(tp_verbs_rcache_lookup(&rc, at(0, 0), 1, TP_ACCESS_LOCAL));
    r = get(at(0, 0), 10, TP_ACCESS_LOCAL);
    assert_int_equal(r->refs, 1);
    tp_verbs_rcache_put(&rc, r);
}

static void leaks_are_released_at_fini(void **state)
{
    (void)state;
    get(at(0, 0), 10, TP_ACCESS_LOCAL);
    tp_verbs_rcache_fini(&rc);
    assert_int_equal(dev.live, 0);
    assert_int_equal(test_log.warnings, 1);
    assert_non_null(strstr(test_log.warning[0], "still has 1 references"));
    tp_verbs_rcache_ops_t ops = {fake_reg, fake_dereg, NULL};
    tp_verbs_rcache_init(&rc, &ops, PAGE); /* for teardown */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(registers_whole_pages, setup, teardown),
        cmocka_unit_test_setup_teardown(contained_ranges_share, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(access_must_be_covered, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(many_entries_stay_sorted, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(failure_leaves_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(leaks_are_released_at_fini, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
