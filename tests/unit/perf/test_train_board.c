/* The driver's board: the snapshot handshake between the driver and the
 * reporting worker, and step pacing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "perf/train/board.h"
#include "perf/train/pace.h"

static void snapshot_handshake(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof(path), "/tmp/test-train-board-%d", (int)getpid());
    unlink(path);
    perf_board_t *drv, *wrk;
    assert_int_equal(perf_board_create(path, 3, &drv), STRATA_OK);
    drv->workers = 2;
    assert_int_equal(perf_board_open(path, &wrk), STRATA_OK);
    assert_int_equal(wrk->workers, 2);
    assert_int_equal(wrk->params, 3);

    float m1[3] = {1, 2, 3}, m2[3] = {4, 5, 6};
    int64_t at;
    perf_board_offer(wrk, m1); /* not asked for: ignored */
    assert_int_equal(perf_board_ready(drv, &at), 0);
    perf_board_request(drv);
    perf_board_offer(wrk, m1);
    perf_board_offer(wrk, m2); /* the first one stays until read */
    assert_int_equal(perf_board_ready(drv, &at), 1);
    assert_true(at > 0);
    assert_memory_equal(perf_board_snapshot(drv), m1, sizeof(m1));
    perf_board_request(drv); /* still unread: no effect */
    perf_board_release(drv);
    assert_int_equal(perf_board_ready(drv, &at), 0);

    perf_board_finish(wrk, m2);
    assert_int_equal(atomic_load(&drv->final_set), 1);
    assert_memory_equal(perf_board_final(drv), m2, sizeof(m2));
    int64_t t0 = perf_board_start(wrk);
    assert_int_equal(perf_board_start(drv), t0); /* the first caller's */
    perf_board_close(wrk);
    perf_board_close(drv);

    assert_int_equal(perf_board_create(path, 3, &drv), STRATA_ERR_IO);
    FILE *f = fopen(path, "wb"); /* not a board */
    fputs("hello", f);
    fclose(f);
    assert_int_equal(perf_board_open(path, &wrk), STRATA_ERR_PROTO);
    unlink(path);
}

static void pacing_pads_and_counts_overruns(void **state)
{
    (void)state;
    perf_pace_t p;
    perf_pace_init(&p, 2.0, 0.005, 0.0, 1);
    int64_t t0 = perf_now_ns();
    perf_pace_begin(&p);
    perf_pace_end(&p);
    assert_true(perf_now_ns() - t0 >= 10000000); /* 2 x 5 ms */
    assert_true(p.last_s >= 0.010);
    assert_int_equal(p.overruns, 0);
    perf_pace_begin(&p);
    usleep(15000); /* "compute" longer than the padding */
    perf_pace_end(&p);
    assert_int_equal(p.overruns, 1);
    assert_int_equal(p.steps, 2);
    assert_true(p.compute_s >= 0.015);
    assert_true(p.paced_s >= 0.010 + 0.015); /* both steps, as they took */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(snapshot_handshake),
        cmocka_unit_test(pacing_pads_and_counts_overruns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
