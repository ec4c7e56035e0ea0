/*
 * A job without a secret: allowed on loopback only (its ranks then listen
 * on the coordinator's loopback host, not on every interface), elsewhere
 * only with STRATA_INSECURE=1, and otherwise refused at boot with an error
 * naming the address and the settings that fix it. One case per row: the
 * settings of an aggregator (rank 1 of 3, two aggregators), then what
 * eng_boot_prepare makes of them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "tests/support/test_log.h"
#include "tests/unit/engine/fake_tp.h"

typedef struct exposure_case {
    const char *name;
    const char *settings[6];
    strata_status_t status;
    const char *error;       /* in the error logged, when not OK */
    const char *listen_host; /* where the rank listens, when OK */
} exposure_case_t;

static const exposure_case_t cases[] = {
    {.name = "loopback coordinator, no secret: listens on loopback",
     .settings = {"COORD=127.0.0.1:7"},
     .listen_host = "127.0.0.1"},
    {.name = "localhost coordinator, no secret",
     .settings = {"COORD=localhost:7"},
     .listen_host = "localhost"},
    {.name = "loopback coordinator and host, no secret",
     .settings = {"COORD=127.0.0.1:7", "HOST=127.0.0.1"},
     .listen_host = "127.0.0.1"},
    {.name = "coordinator elsewhere, no secret",
     .settings = {"COORD=198.18.0.9:29500"},
     .status = STRATA_ERR_CONFIG,
     .error = "no job secret, and the coordinator's address 198.18.0.9:29500 "
              "is not loopback: set STRATA_JOB_SECRET or "
              "STRATA_JOB_SECRET_FILE"},
    {.name = "the error names the way out",
     .settings = {"COORD=198.18.0.9:29500"},
     .status = STRATA_ERR_CONFIG,
     .error = "or STRATA_INSECURE=1 to let anyone"},
    {.name = "listening beyond loopback, no secret",
     .settings = {"COORD=127.0.0.1:7", "HOST=0.0.0.0"},
     .status = STRATA_ERR_CONFIG,
     .error = "STRATA_HOST=0.0.0.0 is not loopback"},
    {.name = "coordinator file without a host: every interface",
     .settings = {"COORD_FILE=/nonexistent/coord"},
     .status = STRATA_ERR_CONFIG,
     .error = "rank 0 listens on every interface"},
    {.name = "coordinator file and loopback host",
     .settings = {"COORD_FILE=/nonexistent/coord", "HOST=127.0.0.1"},
     .listen_host = "127.0.0.1"},
    {.name = "verbs reaches other hosts",
     .settings = {"COORD=127.0.0.1:7", "TRANSPORT=verbs"},
     .status = STRATA_ERR_CONFIG,
     .error = "STRATA_TRANSPORT=verbs reaches other hosts"},
    {.name = "elsewhere with STRATA_INSECURE=1",
     .settings = {"COORD=198.18.0.9:29500", "INSECURE=1"},
     .listen_host = ""},
    {.name = "elsewhere with a secret",
     .settings = {"COORD=198.18.0.9:29500", "JOB_SECRET=s3cret"},
     .listen_host = ""},
    {.name = "elsewhere with a secret file",
     .settings = {"COORD=198.18.0.9:29500",
                  "JOB_SECRET_FILE=/nonexistent/secret"},
     .listen_host = ""}, /* reading it is the transport's */
};

static void run_case(const exposure_case_t *c)
{
    const char *settings[16] = {"RANK=1", "SIZE=3", "NUM_AGGREGATORS=2",
                                "TIMEOUT_MS=2000"};
    size_t n = 4;
    bool tcp_given = false;
    for (size_t i = 0; c->settings[i]; i++) {
        settings[n++] = c->settings[i];
        tcp_given |= strncmp(c->settings[i], "TRANSPORT=", 10) == 0;
    }
    if (!tcp_given)
        settings[n++] = "TRANSPORT=tcp";
    test_log_start();
    strata_ctx_t *ctx;
    if (eng_ctx_create(settings, &ctx) != STRATA_OK)
        fail_msg("%s: bad settings: %s", c->name, test_log.last);
    ctx->coord_tp = fake_tp_open();
    ctx->data_tp[ENG_PROV_TCP] = fake_tp_open();
    strata_status_t st = eng_boot_prepare(ctx);
    if (st != c->status)
        fail_msg("%s: %s, expected %s (last logged: %s)", c->name,
                 strata_strerror(st), strata_strerror(c->status),
                 test_log.last);
    if (c->error && !strstr(test_log.last_error, c->error))
        fail_msg("%s: error '%s' does not say '%s'", c->name,
                 test_log.last_error, c->error);
    if (c->listen_host && strcmp(ctx->listen_host, c->listen_host) != 0)
        fail_msg("%s: listens on '%s', expected '%s'", c->name,
                 ctx->listen_host, c->listen_host);
    if (st != STRATA_OK && test_log.errors != 1)
        fail_msg("%s: %d errors logged, expected one", c->name,
                 test_log.errors);
    eng_ctx_free(ctx);
    test_log_stop();
}

static void test_exposure_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++)
        run_case(&cases[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exposure_cases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
