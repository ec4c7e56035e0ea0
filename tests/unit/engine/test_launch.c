/* Launcher environments: which variables give the rank, size, local rank and
 * coordinator, their precedence, and the errors for what is missing. One
 * case per row: the environment, then what eng_launch_detect makes of it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/config.h"
#include "engine/launch.h"
#include "tests/support/test_log.h"

#define ANY INT32_MIN /* a field the case does not check */

/* What eng_launch_detect finds (ANY and NULL: not checked). */
typedef struct launch_want {
    int rank, size, local_rank, naggs;
    const char *launcher, *coord, *coord_file;
} launch_want_t;

typedef struct launch_case {
    const char *name;
    const char *env[8];     /* VAR=value, over an environment without any */
    strata_status_t status; /* and, when not OK, in the error logged: */
    const char *error;
    launch_want_t want;
} launch_case_t;

static const launch_case_t cases[] = {
    {.name = "explicit settings",
     .env = {"STRATA_RANK=3", "STRATA_SIZE=6", "STRATA_NUM_AGGREGATORS=2",
             "STRATA_COORD=node1:29500"},
     .want = {.rank = 3,
              .size = 6,
              .local_rank = -1,
              .naggs = 2,
              .launcher = "STRATA_RANK",
              .coord = "node1:29500",
              .coord_file = ""}},
    /* mpirun inside an sbatch allocation: both are present. */
    {.name = "Open MPI wins over Slurm",
     .env = {"SLURM_PROCID=0", "SLURM_NTASKS=1", "OMPI_COMM_WORLD_RANK=4",
             "OMPI_COMM_WORLD_SIZE=8", "OMPI_COMM_WORLD_LOCAL_RANK=0",
             "STRATA_COORD=head:1234"},
     .want = {.rank = 4,
              .size = 8,
              .local_rank = 0,
              .naggs = ANY,
              .launcher = "Open MPI"}},
    {.name = "Slurm, coordinator file",
     .env = {"SLURM_PROCID=5", "SLURM_NTASKS=16", "SLURM_LOCALID=1",
             "STRATA_COORD_FILE=/shared/job/coord"},
     .want = {.rank = 5,
              .size = 16,
              .local_rank = 1,
              .naggs = ANY,
              .launcher = "Slurm",
              .coord = "",
              .coord_file = "/shared/job/coord"}},
    {.name = "PMIx without a size",
     .env = {"PMIX_RANK=2", "STRATA_COORD=h:1"},
     .status = STRATA_ERR_CONFIG,
     .error = "STRATA_SIZE"},
    {.name = "PMIx, size from STRATA_SIZE",
     .env = {"PMIX_RANK=2", "STRATA_COORD=h:1", "STRATA_SIZE=4"},
     .want = {.rank = 2,
              .size = 4,
              .local_rank = ANY,
              .naggs = ANY,
              .launcher = "PMIx"}},
    {.name = "torchrun: the coordinator at MASTER_PORT+1",
     .env = {"RANK=1", "WORLD_SIZE=3", "LOCAL_RANK=1", "MASTER_ADDR=10.0.0.1",
             "MASTER_PORT=29500"},
     .want = {.rank = 1,
              .size = 3,
              .local_rank = 1,
              .naggs = ANY,
              .launcher = "torchrun",
              .coord = "10.0.0.1:29501"}},
    {.name = "torchrun: an explicit coordinator wins",
     .env = {"RANK=1", "WORLD_SIZE=3", "LOCAL_RANK=1", "MASTER_ADDR=10.0.0.1",
             "MASTER_PORT=29500", "STRATA_COORD=other:7"},
     .want = {.rank = 1,
              .size = 3,
              .local_rank = ANY,
              .naggs = ANY,
              .launcher = NULL,
              .coord = "other:7"}},
    {.name = "an explicit rank overrides the launcher's",
     .env = {"OMPI_COMM_WORLD_RANK=4", "OMPI_COMM_WORLD_SIZE=8",
             "STRATA_RANK=7", "STRATA_COORD=h:1"},
     .want = {.rank = 7, .size = 8, .local_rank = ANY, .naggs = ANY}},
    {.name = "no launcher",
     .env = {"STRATA_COORD=h:1"},
     .status = STRATA_ERR_CONFIG,
     .error = "no launcher environment"},
    {.name = "a malformed rank",
     .env = {"SLURM_PROCID=x1", "SLURM_NTASKS=4", "STRATA_COORD=h:1"},
     .status = STRATA_ERR_CONFIG,
     .error = "SLURM_PROCID='x1'"},
    {.name = "a rank beyond the size",
     .env = {"SLURM_PROCID=4", "SLURM_NTASKS=4", "STRATA_COORD=h:1"},
     .status = STRATA_ERR_CONFIG,
     .error = "rank 4 (from SLURM_PROCID)"},
    {.name = "aggregators leave no worker",
     .env = {"SLURM_PROCID=1", "SLURM_NTASKS=4", "STRATA_NUM_AGGREGATORS=4",
             "STRATA_COORD=h:1"},
     .status = STRATA_ERR_CONFIG,
     .error = "leaves no worker"},
    {.name = "no coordinator",
     .env = {"SLURM_PROCID=1", "SLURM_NTASKS=4", "STRATA_NUM_AGGREGATORS=1"},
     .status = STRATA_ERR_CONFIG,
     .error = "no coordinator address"},
    {.name = "torchrun's MASTER_PORT+1 out of range",
     .env = {"SLURM_PROCID=1", "SLURM_NTASKS=4", "MASTER_ADDR=h",
             "MASTER_PORT=65535"},
     .status = STRATA_ERR_CONFIG,
     .error = "MASTER_PORT+1"},
};

#define NCASES (sizeof(cases) / sizeof(*cases))

static const char *const launcher_vars[] = {
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMIX_RANK",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "STRATA_RANK",
    "STRATA_SIZE",
    "STRATA_LOCAL_RANK",
    "STRATA_COORD",
    "STRATA_COORD_FILE",
    "STRATA_NUM_AGGREGATORS",
    "STRATA_CONFIG",
    "STRATA_LAUNCHER_FD",
};

static void clear_env(void)
{
    for (size_t i = 0; i < sizeof(launcher_vars) / sizeof(*launcher_vars); i++)
        unsetenv(launcher_vars[i]);
}

static int setup(void **state)
{
    clear_env();
    return test_log_setup(state);
}

static int teardown(void **state)
{
    clear_env();
    return test_log_teardown(state);
}

static void expect_int(const launch_case_t *c, const char *field, int want,
                       int got)
{
    if (want != ANY && want != got)
        fail_msg("%s: %s %d, expected %d", c->name, field, got, want);
}

static void expect_str(const launch_case_t *c, const char *field,
                       const char *want, const char *got)
{
    if (want && strcmp(want, got) != 0)
        fail_msg("%s: %s '%s', expected '%s'", c->name, field, got, want);
}

static strata_status_t detect(eng_launch_t *l)
{
    eng_config_t *cfg;
    assert_int_equal(eng_config_load(&cfg), STRATA_OK);
    strata_status_t st = eng_launch_detect(cfg, l);
    eng_config_free(cfg);
    return st;
}

static void run_case(void **state)
{
    const launch_case_t *c = *state;
    for (size_t i = 0; c->env[i]; i++) {
        char var[64];
        const char *eq = strchr(c->env[i], '=');
        snprintf(var, sizeof(var), "%.*s", (int)(eq - c->env[i]), c->env[i]);
        setenv(var, eq + 1, 1);
    }
    eng_launch_t l;
    strata_status_t st = detect(&l);
    if (st != c->status)
        fail_msg("%s: %s, expected %s (last logged: %s)", c->name,
                 strata_strerror(st), strata_strerror(c->status),
                 test_log.last);
    if (st != STRATA_OK) {
        test_log_expect(c->error);
        return;
    }
    assert_int_equal(test_log.errors, 0);
    const launch_want_t *w = &c->want;
    expect_int(c, "rank", w->rank, l.rank);
    expect_int(c, "size", w->size, l.size);
    expect_int(c, "local rank", w->local_rank, l.local_rank);
    expect_int(c, "aggregators", w->naggs, l.num_aggregators);
    expect_str(c, "launcher", w->launcher, l.launcher);
    expect_str(c, "coordinator", w->coord, l.coord);
    expect_str(c, "coordinator file", w->coord_file, l.coord_file);
}

static void aggregators_are_the_first_ranks(void **state)
{
    (void)state;
    eng_launch_t l = {.rank = 3, .size = 6, .num_aggregators = 2};
    assert_false(eng_launch_is_aggregator(&l, 3));
    assert_false(eng_launch_is_aggregator(&l, 2));
    assert_true(eng_launch_is_aggregator(&l, 1));
    assert_true(eng_launch_is_aggregator(&l, 0));
}

/* strata-run hears on STRATA_LAUNCHER_FD which ranks the job goes on
 * without; anything but a socket is refused by name. */
static void launcher_socket(void **state)
{
    (void)state;
    setenv("STRATA_RANK", "0", 1);
    setenv("STRATA_SIZE", "3", 1);
    setenv("STRATA_COORD", "h:1", 1);
    eng_launch_t l;
    assert_int_equal(detect(&l), STRATA_OK);
    assert_int_equal(l.launcher_fd, -1);
    eng_launch_tell(&l, "dropped %d", 2); /* nobody listens: nothing */

    int sv[2], p[2];
    char fd[16], line[64];
    assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv), 0);
    snprintf(fd, sizeof(fd), "%d", sv[1]);
    setenv("STRATA_LAUNCHER_FD", fd, 1);
    assert_int_equal(detect(&l), STRATA_OK);
    assert_int_equal(l.launcher_fd, sv[1]);
    eng_launch_tell(&l, "dropped %d", 2);
    ssize_t n = recv(sv[0], line, sizeof(line) - 1, MSG_DONTWAIT);
    assert_int_equal(n, 9);
    line[n] = '\0';
    assert_string_equal(line, "dropped 2");

    assert_int_equal(pipe(p), 0);
    snprintf(fd, sizeof(fd), "%d", p[0]);
    setenv("STRATA_LAUNCHER_FD", fd, 1);
    assert_int_equal(detect(&l), STRATA_ERR_CONFIG);
    test_log_expect("is not a socket");
    close(p[0]), close(p[1]), close(sv[0]), close(sv[1]);
}

int main(void)
{
    struct CMUnitTest tests[NCASES + 2];
    for (size_t i = 0; i < NCASES; i++)
        tests[i] = (struct CMUnitTest){.name = cases[i].name,
                                       .test_func = run_case,
                                       .setup_func = setup,
                                       .teardown_func = teardown,
                                       .initial_state = (void *)&cases[i]};
    tests[NCASES] =
        (struct CMUnitTest)cmocka_unit_test(aggregators_are_the_first_ranks);
    tests[NCASES + 1] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(
        launcher_socket, setup, teardown);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
