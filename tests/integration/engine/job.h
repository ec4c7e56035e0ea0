/*
 * What the engine's test programs share: every rank joins, a worker runs
 * its part, an aggregator serves, and everyone leaves; the exit status says
 * which step failed (3) or the worker's own verdict.
 */
#ifndef STRATA_TESTS_ENGINE_JOB_H
#define STRATA_TESTS_ENGINE_JOB_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <strata/strata.h>

static inline int test_job_fail(const char *prog, const char *what,
                                strata_status_t st)
{
    fprintf(stderr, "%s: %s: %s\n", prog, what, strata_strerror(st));
    return 3;
}

/* Joins, runs worker(ctx, arg) on a worker or serves on an aggregator, and
 * finalizes; the first failure decides the status. */
static inline int test_job_run(const char *prog,
                               int (*worker)(strata_ctx_t *, const void *),
                               const void *arg)
{
    strata_ctx_t *ctx;
    strata_status_t st = strata_init(&ctx);
    if (st != STRATA_OK)
        return test_job_fail(prog, "init", st);
    int rc = 0;
    if (strata_role(ctx) == STRATA_ROLE_WORKER)
        rc = worker(ctx, arg);
    else if ((st = strata_serve(ctx)) != STRATA_OK)
        rc = test_job_fail(prog, "serve", st);
    st = strata_finalize(ctx);
    if (rc == 0 && st != STRATA_OK)
        rc = test_job_fail(prog, "finalize", st);
    return rc;
}

/* Whether a log line is a worker's takeover line, and its words: the lost
 * shard, its taker, the resume clock R and the protected clock P. */
static inline bool test_job_takeover_line(const char *line, int *shard_out,
                                          int *taker_out, long long *r_out,
                                          long long *p_out)
{
    int lost;
    const char *at = strstr(line, "aggregator rank ");
    return at &&
           sscanf(at,
                  "aggregator rank %d lost: shard %d taken over by aggregator "
                  "rank %d, resumed at clock %lld (protected at %lld",
                  &lost, shard_out, taker_out, r_out, p_out) == 5;
}

#endif /* STRATA_TESTS_ENGINE_JOB_H */
