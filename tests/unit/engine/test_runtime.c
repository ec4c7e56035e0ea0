/*
 * The engine's runtime in one process and one thread: the coordinator, the
 * aggregators and the workers of a job, each a context of its own, joined
 * over a fake transport (fake_tp.h) and driven turn by turn
 * (eng_loop_once), so that what only multi-process jobs reached before is
 * checked here deterministically: a partition completing and its model
 * written into the workers' buffers, a push held back by the staleness
 * bound, an arrival delivered twice, and a worker or an aggregator lost in
 * the middle of a round.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "engine/aggregator.h"
#include "engine/engine.h"
#include "tests/support/test_log.h"
#include "tests/unit/engine/fake_tp.h"

#define MAX_RANKS 4
#define NA 2000 /* floats of tensor a */
#define NB 1000 /* floats of tensor b */

typedef struct wbufs {
    float a[NA], b[NB], ga[NA], gb[NB];
} wbufs_t;

typedef struct job {
    int size, naggs;
    strata_ctx_t *ctx[MAX_RANKS];
    bool dead[MAX_RANKS];
    wbufs_t buf[MAX_RANKS];
} job_t;

static job_t job;

/* ---- the harness ---- */

static void rank_start(int r, const char *const *extra)
{
    char rank[32], size[32], naggs[32];
    snprintf(rank, sizeof(rank), "RANK=%d", r);
    snprintf(size, sizeof(size), "SIZE=%d", job.size);
    snprintf(naggs, sizeof(naggs), "NUM_AGGREGATORS=%d", job.naggs);
    const char *settings[32] = {rank,
                                size,
                                naggs,
                                "COORD=127.0.0.1:7",
                                "HOST=127.0.0.1",
                                "TRANSPORT=tcp",
                                "TIMEOUT_MS=20000",
                                "PARTITION_BYTES=4096",
                                "LR=0.5"};
    size_t n = 9;
    for (size_t i = 0; extra && extra[i]; i++)
        settings[n++] = extra[i];
    strata_ctx_t *ctx;
    assert_int_equal(eng_ctx_create(settings, &ctx), STRATA_OK);
    /* One job: each context of the process counts as a later job else. */
    ctx->launch.incarnation = 42;
    ctx->coord_tp = fake_tp_open();
    ctx->data_tp[ENG_PROV_TCP] = fake_tp_open();
    assert_int_equal(eng_boot_prepare(ctx), STRATA_OK);
    assert_int_equal(eng_loop_init(ctx), STRATA_OK);
    job.ctx[r] = ctx;
}

/* Turn the loops of the ranks in mask until none has anything to do. */
static void pump_ranks(unsigned mask)
{
    int idle = 0;
    for (int turn = 0; turn < 200000; turn++) {
        bool busy = false;
        for (int r = 0; r < job.size; r++)
            if ((mask & (1u << r)) && !job.dead[r])
                busy |= eng_loop_once(job.ctx[r]);
        if (!busy && ++idle == 3)
            return;
        if (busy)
            idle = 0;
    }
    fail_msg("the ranks never came to rest");
}

static void pump(void)
{
    pump_ranks(~0u);
}

static void job_start(int size, int naggs, const char *const *extra)
{
    memset(&job, 0, sizeof(job));
    job.size = size;
    job.naggs = naggs;
    for (int r = 0; r < size; r++)
        rank_start(r, extra);
    pump();
    for (int r = 0; r < size; r++)
        if (util_gate_load(&job.ctx[r]->joined) != 1)
            fail_msg("rank %d did not join (%s); last logged: %s", r,
                     strata_strerror(eng_fatal(job.ctx[r])), test_log.last);
}

static void job_end(void)
{
    pump();
    for (int r = 0; r < job.size; r++)
        eng_ctx_free(job.ctx[r]);
}

/* The process of rank r dies. */
static void rank_kill(int r)
{
    fake_tp_break(job.ctx[r]->coord_tp);
    fake_tp_break(job.ctx[r]->data_tp[ENG_PROV_TCP]);
    job.dead[r] = true;
}

/* A request done; its status in *st. */
static bool done(strata_request_t **req, strata_status_t *st)
{
    bool is_done;
    *st = eng_req_test(req, &is_done);
    return is_done;
}

static strata_status_t wait_done(strata_request_t **req)
{
    strata_status_t st;
    if (!done(req, &st))
        fail_msg("a request is still pending");
    return st;
}

static strata_request_t *submit(strata_ctx_t *ctx, eng_cmd_type_t type)
{
    eng_cmd_t cmd = {.type = type, .req = eng_req_get(ctx, ENG_REQ_CMD)};
    assert_non_null(cmd.req);
    assert_int_equal(eng_cmd_submit(ctx, &cmd), STRATA_OK);
    return cmd.req;
}

/* Every worker registers a (NA floats) and b (NB floats) and commits;
 * worker 0's parameters are the initial model. */
static void job_commit(void)
{
    strata_request_t *req[MAX_RANKS];
    for (int r = job.naggs; r < job.size; r++) {
        wbufs_t *b = &job.buf[r];
        for (int i = 0; i < NA; i++)
            b->a[i] = r == job.naggs ? (float)i * 0.25f : 1000.0f;
        for (int i = 0; i < NB; i++)
            b->b[i] = r == job.naggs ? (float)i * -0.5f : 1000.0f;
        eng_tensor_desc_t da = {.name = "a", .dtype = STRATA_FP32, .count = NA};
        eng_tensor_desc_t db = {.name = "b", .dtype = STRATA_FP32, .count = NB};
        assert_int_equal(
            eng_worker_register(job.ctx[r], &da, b->a, b->ga, NULL), STRATA_OK);
        assert_int_equal(
            eng_worker_register(job.ctx[r], &db, b->b, b->gb, NULL), STRATA_OK);
        assert_int_equal(eng_worker_commit_start(job.ctx[r], &req[r]),
                         STRATA_OK);
    }
    pump();
    for (int r = job.naggs; r < job.size; r++)
        assert_int_equal(eng_worker_commit_end(job.ctx[r], req[r], 0),
                         STRATA_OK);
}

/* Worker r's gradients: a constant per tensor. */
static void grads(int r, float ga, float gb)
{
    for (int i = 0; i < NA; i++)
        job.buf[r].ga[i] = ga;
    for (int i = 0; i < NB; i++)
        job.buf[r].gb[i] = gb;
}

static strata_request_t *push(int r)
{
    strata_request_t *req;
    assert_int_equal(eng_worker_push(job.ctx[r], NULL, 0, &req), STRATA_OK);
    return req;
}

static strata_request_t *pull(int r, int64_t clock)
{
    strata_request_t *req;
    assert_int_equal(eng_worker_pull(job.ctx[r], clock, &req), STRATA_OK);
    return req;
}

/* Worker r holds the model p0 - shift_a (a), p0 - shift_b (b). */
static void expect_model(int r, float shift_a, float shift_b)
{
    for (int i = 0; i < NA; i++)
        if (job.buf[r].a[i] != (float)i * 0.25f - shift_a)
            fail_msg("rank %d: a[%d] = %g, expected %g", r, i,
                     (double)job.buf[r].a[i],
                     (double)((float)i * 0.25f - shift_a));
    for (int i = 0; i < NB; i++)
        if (job.buf[r].b[i] != (float)i * -0.5f - shift_b)
            fail_msg("rank %d: b[%d] = %g, expected %g", r, i,
                     (double)job.buf[r].b[i],
                     (double)((float)i * -0.5f - shift_b));
}

/* ---- the tests ---- */

/* One aggregator, two workers under bsp: the initial model reaches both;
 * a partition waits for both pushes, its model lands in the parameter
 * buffers, and a pull completes when the write reporting it arrives. */
static void partition_completes(void **state)
{
    (void)state;
    job_start(3, 1, NULL);
    job_commit();
    expect_model(2, 0, 0); /* worker 0's parameters, written to worker 1 */
    strata_ctx_t *agg = job.ctx[0];
    uint32_t nparts = agg->agg->nparts;
    assert_true(nparts > 1);

    grads(1, 1.0f, 2.0f);
    grads(2, 3.0f, -2.0f);
    strata_request_t *push1 = push(1), *pull1 = pull(1, 1);
    pump_ranks(1u << 0 | 1u << 1);
    strata_status_t st;
    assert_false(done(&pull1, &st)); /* the partitions wait for worker 1 */
    assert_int_equal(atomic_load(&agg->cnt.reductions), 0);
    assert_int_equal(atomic_load(&agg->cnt.pushes), nparts);

    strata_request_t *push2 = push(2), *pull2 = pull(2, 1);
    eng_loop_once(job.ctx[2]); /* its writes leave */
    pump_ranks(1u << 0);       /* the aggregator reduces and serves */
    assert_int_equal(atomic_load(&agg->cnt.reductions), nparts);
    assert_false(done(&pull1, &st)); /* written, not reported yet */
    pump_ranks(1u << 1);
    assert_int_equal(wait_done(&pull1), STRATA_OK);
    /* sgd, lr 0.5, the mean gradient: a by (1 + 3) / 2, b by 0 */
    expect_model(1, 1.0f, 0.0f);
    pump();
    assert_int_equal(wait_done(&pull2), STRATA_OK);
    expect_model(2, 1.0f, 0.0f);
    assert_int_equal(wait_done(&push1), STRATA_OK);
    assert_int_equal(wait_done(&push2), STRATA_OK);
    /* the stages of the round (strata-bench-pushpull --breakdown): one
     * round each, timed on the workers; serving timed on the aggregator */
    strata_metrics_t m[3];
    for (int r = 0; r < 3; r++)
        eng_metrics_read(job.ctx[r], &m[r]);
    assert_int_equal(m[0].rounds, 0);
    assert_true(m[0].serve_ns > 0);
    for (int r = 1; r < 3; r++) {
        assert_int_equal(m[r].rounds, 1);
        assert_true(m[r].push_post_ns > 0 && m[r].round_trip_ns > 0);
        assert_int_equal(m[r].reduce_wait_ns, 0);
    }

    strata_request_t *fin[MAX_RANKS];
    for (int r = 0; r < job.size; r++)
        fin[r] = submit(job.ctx[r], ENG_CMD_FINALIZE);
    pump();
    for (int r = 0; r < job.size; r++) {
        assert_int_equal(wait_done(&fin[r]), STRATA_OK);
        assert_int_equal(eng_fatal(job.ctx[r]), STRATA_OK);
    }
    job_end();
}

/* ssp with STALENESS=1: the fast worker's pushes of clocks 0 to 2 leave,
 * its push of clock 3 is held (the model of clock 2 is not served while
 * the other worker has not pushed) until the slow worker's first push. */
static void push_beyond_the_bound_is_held(void **state)
{
    (void)state;
    job_start(3, 1, (const char *const[]){"POLICY=ssp", "STALENESS=1", NULL});
    job_commit();
    strata_ctx_t *agg = job.ctx[0];
    uint32_t nparts = agg->agg->nparts;
    grads(1, 1.0f, 1.0f);
    grads(2, 1.0f, 1.0f);
    strata_request_t *p[4];
    for (int c = 0; c < 3; c++) {
        p[c] = push(1);
        pump();
        assert_int_equal(wait_done(&p[c]), STRATA_OK);
    }
    p[3] = push(1);
    pump();
    strata_status_t st;
    assert_false(done(&p[3], &st));
    assert_int_equal(atomic_load(&agg->cnt.pushes), 3 * nparts);

    strata_request_t *slow = push(2);
    pump();
    assert_int_equal(wait_done(&slow), STRATA_OK);
    assert_int_equal(wait_done(&p[3]), STRATA_OK);
    assert_int_equal(atomic_load(&agg->cnt.pushes), 5 * nparts);
    job_end();
}

/* A gradient write reported twice is a push of a clock already taken: the
 * aggregator refuses it, naming the worker, and the whole job fails. */
static void duplicate_arrival_refused(void **state)
{
    (void)state;
    job_start(3, 1, NULL);
    job_commit();
    strata_request_t *push1 = push(1), *push2 = push(2);
    pump();
    assert_int_equal(wait_done(&push1), STRATA_OK);
    assert_int_equal(wait_done(&push2), STRATA_OK);
    test_log.errors = 0;

    assert_true(fake_tp_replay_imm(job.ctx[0]->data_tp[ENG_PROV_TCP]));
    pump();
    for (int r = 0; r < job.size; r++)
        assert_int_equal(eng_fatal(job.ctx[r]), STRATA_ERR_PROTO);
    assert_non_null(strstr(job.ctx[0]->fatal_msg, "carry clock bits"));
    assert_non_null(strstr(job.ctx[0]->fatal_msg, "from worker rank"));
    /* each rank said why once: the aggregator, then the two workers */
    test_log_expect_n(3, "carry clock bits");
    job_end();
}

/* A name registered twice is refused by name, among many (the check is a
 * lookup: it was a scan, quadratic in the tensors). */
static void tensor_registered_twice(void **state)
{
    (void)state;
    job_start(2, 1, NULL);
    static float p[4], g[4];
    eng_tensor_desc_t d = {.dtype = STRATA_FP32, .count = 4};
    for (int i = 0; i < 5000; i++) {
        snprintf(d.name, sizeof(d.name), "layer%d.bias", i);
        assert_int_equal(eng_worker_register(job.ctx[1], &d, p, g, NULL),
                         STRATA_OK);
    }
    snprintf(d.name, sizeof(d.name), "layer%d.bias", 1234);
    assert_int_equal(eng_worker_register(job.ctx[1], &d, p, g, NULL),
                     STRATA_ERR_INVALID);
    test_log_expect("tensor 'layer1234.bias' is registered twice");
    assert_int_equal(eng_worker_ntensors(job.ctx[1]), 5000);
    job_end();
}

/* A worker dies after the other pushed: the round cannot complete, and
 * every rank left names the dead worker. */
static void worker_lost_mid_round(void **state)
{
    (void)state;
    job_start(3, 1, NULL);
    job_commit();
    strata_request_t *push1 = push(1), *pull1 = pull(1, 1);
    pump();
    test_log.errors = 0;
    rank_kill(2);
    pump();
    assert_int_equal(wait_done(&pull1), STRATA_ERR_PEER);
    (void)wait_done(&push1);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(eng_fatal(job.ctx[r]), STRATA_ERR_PEER);
        if (!strstr(job.ctx[r]->fatal_msg, "worker rank 2"))
            fail_msg("rank %d does not name worker rank 2: %s", r,
                     job.ctx[r]->fatal_msg);
    }
    test_log_expect_n(2, "rank 2");
    job_end();
}

/* An aggregator dies mid-round: the worker, which saw its connection drop
 * and asked the coordinator, pushes on meanwhile without writing to the
 * dead link, and fails with the coordinator's word naming the aggregator
 * (not with its own failed write). */
static void aggregator_lost_mid_round(void **state)
{
    (void)state;
    job_start(3, 2, NULL);
    job_commit();
    strata_request_t *p0 = push(2), *q1 = pull(2, 1);
    pump();
    assert_int_equal(wait_done(&p0), STRATA_OK);
    assert_int_equal(wait_done(&q1), STRATA_OK);
    test_log.errors = 0;

    rank_kill(1);
    pump_ranks(1u << 2); /* the worker sees the link go, asks rank 0 */
    assert_int_equal(eng_fatal(job.ctx[2]), STRATA_OK);
    strata_request_t *p1 = push(2);
    pump_ranks(1u << 2);
    assert_int_equal(eng_fatal(job.ctx[2]), STRATA_OK);
    pump();
    strata_status_t st;
    if (done(&p1, &st))
        assert_int_equal(st, STRATA_ERR_PEER);
    for (int r = 0; r < 3; r += 2) {
        assert_int_equal(eng_fatal(job.ctx[r]), STRATA_ERR_PEER);
        if (!strstr(job.ctx[r]->fatal_msg, "aggregator rank 1"))
            fail_msg("rank %d does not name aggregator rank 1: %s", r,
                     job.ctx[r]->fatal_msg);
    }
    test_log_expect_n(2, "aggregator rank 1");
    job_end();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(partition_completes, test_log_setup,
                                        test_log_teardown),
        cmocka_unit_test_setup_teardown(push_beyond_the_bound_is_held,
                                        test_log_setup, test_log_teardown),
        cmocka_unit_test_setup_teardown(duplicate_arrival_refused,
                                        test_log_setup, test_log_teardown),
        cmocka_unit_test_setup_teardown(tensor_registered_twice, test_log_setup,
                                        test_log_teardown),
        cmocka_unit_test_setup_teardown(worker_lost_mid_round, test_log_setup,
                                        test_log_teardown),
        cmocka_unit_test_setup_teardown(aggregator_lost_mid_round,
                                        test_log_setup, test_log_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
