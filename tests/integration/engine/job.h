/*
 * What the engine's test programs share: every rank joins, a worker runs
 * its part, an aggregator serves, and everyone leaves; the exit status says
 * which step failed (3) or the worker's own verdict.
 */
#ifndef STRATA_TESTS_ENGINE_JOB_H
#define STRATA_TESTS_ENGINE_JOB_H

#include <stdio.h>

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

#endif /* STRATA_TESTS_ENGINE_JOB_H */
