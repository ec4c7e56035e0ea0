/* Group membership segments: which pushes make up each group clock, across
 * moves, so that a regroup loses no push and counts none twice; and the
 * regroup plan: its join clocks, and members that stay rebased with the
 * newcomers. (End to end: tests/integration/engine/test_gssp.sh.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "engine/members.h"

/* For every group clock below `upto`, how many times each worker's push
 * w_clock is counted: each must be counted exactly once for every push
 * the worker made (below its clock `pushed`). */
static void each_push_once(const eng_members_t *m, uint32_t groups,
                           int64_t upto, const int64_t *pushed)
{
    uint32_t nw = eng_members_workers(m);
    int count[4][64] = {{0}};
    for (uint32_t g = 0; g < groups; g++)
        for (int64_t c = 0; c < upto; c++) {
            uint32_t n;
            const uint32_t *mem = eng_members_of(m, g, &n);
            for (uint32_t k = 0; k < n; k++) {
                uint32_t seg;
                int64_t wc;
                if (eng_members_at(m, mem[k], g, c, &seg, &wc)) {
                    assert_true(wc >= 0 && wc < 64);
                    assert_int_equal(eng_members_find(m, mem[k], wc), seg);
                    count[mem[k]][wc]++;
                }
            }
        }
    for (uint32_t w = 0; w < nw; w++)
        for (int64_t wc = 0; wc < pushed[w]; wc++)
            assert_int_equal(count[w][wc], 1);
}

static void moves_count_every_push_once(void **state)
{
    (void)state;
    eng_members_t *m;
    const uint32_t first[4] = {0, 0, 1, 1};
    assert_int_equal(eng_members_create(4, 3, first, &m), STRATA_OK);
    /* Group 0 (workers 0, 1) is at clock 10, group 1 (2, 3) at 4. Swap
     * them: 0 and 1 join group 1 past its clocks (J = 10, where the movers
     * were), 2 and 3 join group 0 past every clock it reached (10). */
    assert_int_equal(eng_members_move(m, 0, 10, 1, 10), STRATA_OK);
    assert_int_equal(eng_members_move(m, 1, 10, 1, 10), STRATA_OK);
    assert_int_equal(eng_members_move(m, 2, 4, 0, 10), STRATA_OK);
    assert_int_equal(eng_members_move(m, 3, 4, 0, 10), STRATA_OK);
    /* Group 1's clocks 4..9 have no member: nobody pushes into them. */
    uint32_t seg;
    int64_t wc;
    assert_false(eng_members_at(m, 2, 1, 5, &seg, &wc));
    assert_false(eng_members_at(m, 0, 1, 5, &seg, &wc));
    assert_true(eng_members_at(m, 0, 1, 10, &seg, &wc));
    assert_int_equal(seg, 1);
    assert_int_equal(wc, 10);
    assert_true(eng_members_at(m, 2, 0, 10, &seg, &wc));
    assert_int_equal(wc, 4);
    /* Worker 3 moves again, into the empty group 2, then back to 0. */
    assert_int_equal(eng_members_move(m, 3, 8, 2, 14), STRATA_OK);
    assert_int_equal(eng_members_move(m, 3, 12, 0, 30), STRATA_OK);
    assert_int_equal(eng_members_nsegments(m, 3), 4);
    assert_int_equal(eng_members_current(m, 3)->group, 0);
    assert_int_equal(eng_members_current(m, 3)->offset, 18);
    const int64_t pushed[4] = {20, 20, 20, 20};
    each_push_once(m, 3, 64, pushed);
    eng_members_destroy(m);
}

static void bad_moves_are_refused(void **state)
{
    (void)state;
    eng_members_t *m;
    const uint32_t first[2] = {0, 5};
    assert_int_equal(eng_members_create(2, 2, first, &m), STRATA_ERR_INVALID);
    const uint32_t ok[2] = {0, 1};
    assert_int_equal(eng_members_create(2, 2, ok, &m), STRATA_OK);
    assert_int_equal(eng_members_move(m, 0, 5, 1, 5), STRATA_OK);
    assert_int_equal(eng_members_move(m, 0, 4, 0, 9), STRATA_ERR_INVALID);
    assert_int_equal(eng_members_move(m, 0, 6, 2, 9), STRATA_ERR_INVALID);
    assert_int_equal(eng_members_move(m, 2, 6, 0, 9), STRATA_ERR_INVALID);
    eng_members_destroy(m);
}

/* Groups 0 = {0, 1} (at its clock 40) and 1 = {2, 3} (at 10). Worker 0
 * slows down and joins group 1, whose members stay: all three continue at
 * J = 40 (past group 1's clocks, and no lower than worker 0's), so worker 0
 * does not wait 30 steps of group 1 for them; group 0 keeps its numbering. */
static void a_newcomer_rebases_the_group_it_joins(void **state)
{
    (void)state;
    eng_members_t *m;
    const uint32_t first[4] = {0, 0, 1, 1};
    assert_int_equal(eng_members_create(4, 2, first, &m), STRATA_OK);
    const int64_t frozen[4] = {40, 40, 10, 11};
    const uint32_t target[4] = {1, 0, 1, 1};
    eng_move_t moves[4];
    uint32_t n;
    assert_int_equal(eng_members_regroup(m, frozen, target, moves, &n),
                     STRATA_OK);
    assert_int_equal(n, 3); /* worker 1 stays where it was */
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(moves[i].group, 1);
        assert_int_equal(moves[i].group_clock, 40);
        assert_int_equal(moves[i].start, frozen[moves[i].worker]);
    }
    assert_int_equal(eng_members_nsegments(m, 1), 1);
    assert_int_equal(eng_members_current(m, 2)->offset, 30);
    assert_int_equal(eng_members_current(m, 3)->offset, 29);
    /* Every push once, whichever clock each had reached. */
    const int64_t pushed[4] = {60, 60, 30, 30};
    each_push_once(m, 2, 64, pushed);
    /* Worker 0 comes back: group 0 (worker 1 at 55) takes it at 55, past
     * its own clocks and worker 0's 44 in group 1; group 1 stays. */
    const int64_t again[4] = {44, 55, 14, 14};
    const uint32_t back[4] = {0, 0, 1, 1};
    assert_int_equal(eng_members_regroup(m, again, back, moves, &n), STRATA_OK);
    assert_int_equal(n, 1);
    assert_int_equal(moves[0].worker, 0);
    assert_int_equal(moves[0].group_clock, 55);
    eng_members_destroy(m);
}

/* A group's J is past the clocks of workers that left it or moved out, and
 * workers not frozen (gone) take no part. */
static void the_join_clock_is_past_every_clock_pushed(void **state)
{
    (void)state;
    eng_members_t *m;
    const uint32_t first[3] = {0, 0, 1};
    assert_int_equal(eng_members_create(3, 2, first, &m), STRATA_OK);
    eng_members_retire(m, 1, 90); /* worker 1 left group 0 at its clock 90 */
    const int64_t frozen[3] = {70, -1, 20};
    const uint32_t target[3] = {0, 0, 0};
    eng_move_t moves[3];
    uint32_t n;
    assert_int_equal(eng_members_regroup(m, frozen, target, moves, &n),
                     STRATA_OK);
    assert_int_equal(n, 2); /* worker 0 rebased, worker 2 joined */
    assert_int_equal(moves[0].group_clock, 90);
    assert_int_equal(moves[1].group_clock, 90);
    assert_int_equal(eng_members_nsegments(m, 1), 1);
    const uint32_t bad[3] = {0, 0, 2};
    assert_int_equal(eng_members_regroup(m, frozen, bad, moves, &n),
                     STRATA_ERR_INVALID);
    eng_members_destroy(m);
}

/* A taken shard resumes past every worker's first clock without it and
 * every last segment's start, each group's members at one clock of it. */
static void a_taken_shard_resumes_each_group_at_one_clock(void **state)
{
    (void)state;
    eng_members_t *m;
    const uint32_t first[4] = {0, 0, 1, 1};
    assert_int_equal(eng_members_create(4, 2, first, &m), STRATA_OK);
    int64_t r[4];
    eng_members_resume(m, 7, r); /* offsets 0: every worker at 7 */
    for (int w = 0; w < 4; w++)
        assert_int_equal(r[w], 7);
    const int64_t frozen[4] = {40, 40, 10, 11};
    const uint32_t target[4] = {1, 0, 1, 1};
    eng_move_t moves[4];
    uint32_t n;
    assert_int_equal(eng_members_regroup(m, frozen, target, moves, &n),
                     STRATA_OK);
    /* group 1 at 40: workers 0 (offset 0), 2 (30), 3 (29); group 0:
     * worker 1 (offset 0). From 42 on: group 1 resumes at 42 + 30. */
    eng_members_resume(m, 42, r);
    assert_int_equal(r[0], 72);
    assert_int_equal(r[1], 42);
    assert_int_equal(r[2], 42);
    assert_int_equal(r[3], 43);
    for (int w = 0; w < 4; w++) {
        const eng_segment_t *s = eng_members_current(m, w);
        assert_true(r[w] >= 42 && r[w] >= s->start);
        if (s->group == 1)
            assert_int_equal(r[w] + s->offset, 72);
    }
    /* Not before a segment's start: from 5, group 1 resumes at 40 + 30. */
    eng_members_resume(m, 5, r);
    assert_int_equal(r[0], 70);
    assert_int_equal(r[1], 40);
    assert_int_equal(r[2], 40);
    eng_members_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(moves_count_every_push_once),
        cmocka_unit_test(bad_moves_are_refused),
        cmocka_unit_test(a_newcomer_rebases_the_group_it_joins),
        cmocka_unit_test(the_join_clock_is_past_every_clock_pushed),
        cmocka_unit_test(a_taken_shard_resumes_each_group_at_one_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
