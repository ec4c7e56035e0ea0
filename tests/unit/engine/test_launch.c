/* Launcher environments: which variables give the rank, size, local rank and
 * coordinator, their precedence, and the errors for what is missing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/config.h"
#include "engine/launch.h"
#include "util/log.h"

static char last_error[1024];

static void capture(void *arg, util_log_level_t level, const char *line)
{
    (void)arg;
    if (level == UTIL_LOG_ERROR)
        snprintf(last_error, sizeof(last_error), "%s", line);
}

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

static int setup(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(launcher_vars) / sizeof(*launcher_vars); i++)
        unsetenv(launcher_vars[i]);
    last_error[0] = '\0';
    util_log_set_sink(capture, NULL);
    return 0;
}

static int teardown(void **state)
{
    util_log_set_sink(NULL, NULL);
    return setup(state);
}

static strata_status_t detect(eng_launch_t *l)
{
    eng_config_t *cfg;
    assert_int_equal(eng_config_load(&cfg), STRATA_OK);
    strata_status_t st = eng_launch_detect(cfg, l);
    eng_config_free(cfg);
    return st;
}

static void explicit_settings(void **state)
{
    (void)state;
    setenv("STRATA_RANK", "3", 1);
    setenv("STRATA_SIZE", "6", 1);
    setenv("STRATA_NUM_AGGREGATORS", "2", 1);
    setenv("STRATA_COORD", "node1:29500", 1);
    eng_launch_t l;
    assert_int_equal(detect(&l), STRATA_OK);
    assert_int_equal(l.rank, 3);
    assert_int_equal(l.size, 6);
    assert_int_equal(l.local_rank, -1);
    assert_int_equal(l.num_aggregators, 2);
    assert_string_equal(l.coord, "node1:29500");
    assert_string_equal(l.coord_file, "");
    assert_false(eng_launch_is_aggregator(&l, 3));
    assert_true(eng_launch_is_aggregator(&l, 1));
}

static void open_mpi_wins_over_slurm(void **state)
{
    (void)state;
    /* mpirun inside an sbatch allocation: both are present. */
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "1", 1);
    setenv("OMPI_COMM_WORLD_RANK", "4", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
    setenv("STRATA_COORD", "head:1234", 1);
    eng_launch_t l;
    assert_int_equal(detect(&l), STRATA_OK);
    assert_int_equal(l.rank, 4);
    assert_int_equal(l.size, 8);
    assert_int_equal(l.local_rank, 0);
    assert_string_equal(l.launcher, "Open MPI");
}

static void slurm(void **state)
{
    (void)state;
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_NTASKS", "16", 1);
    setenv("SLURM_LOCALID", "1", 1);
    setenv("STRATA_COORD_FILE", "/shared/job/coord", 1);
    eng_launch_t l;
    assert_int_equal(detect(&l), STRATA_OK);
    assert_int_equal(l.rank, 5);
    assert_int_equal(l.size, 16);
    assert_int_equal(l.local_rank, 1);
    assert_string_equal(l.launcher, "Slurm");
    assert_string_equal(l.coord, "");
    assert_string_equal(l.coord_file, "/shared/job/coord");
}

static void pmix_takes_size_from_slurm_or_strata(void **state)
{
    (void)state;
    setenv("PMIX_RANK", "2", 1);
    setenv("STRATA_COORD", "h:1", 1);
    eng_launch_t l;
    assert_int_equal(detect(&l), STRATA_ERR_CONFIG);
    assert_non_null(strstr(last_error, "STRATA_SIZE"));
    setenv("STRATA_SIZE", "4", 1);
    assert_int_equal(detect(&l), STRATA_OK);
    assert_int_equal(l.rank, 2);
    assert_int_equal(l.size, 4);
    assert_string_equal(l.launcher, "PMIx");
}

static void torchrun_coordinator_is_master_port_plus_one(void **state)
{
    (void)state;
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "3", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("MASTER_ADDR", "10.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    eng_launch_t l;
    assert_int_equal(detect(&l), STRATA_OK);
    assert_int_equal(l.rank, 1);
    assert_int_equal(l.size, 3);
    assert_string_equal(l.coord, "10.0.0.1:29501");
    /* An explicit coordinator wins. */
    setenv("STRATA_COORD", "other:7", 1);
    assert_int_equal(detect(&l), STRATA_OK);
    assert_string_equal(l.coord, "other:7");
}

static void explicit_rank_overrides_launcher(void **state)
{
    (void)state;
    setenv("OMPI_COMM_WORLD_RANK", "4", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
    setenv("STRATA_RANK", "7", 1);
    setenv("STRATA_COORD", "h:1", 1);
    eng_launch_t l;
    assert_int_equal(detect(&l), STRATA_OK);
    assert_int_equal(l.rank, 7);
    assert_int_equal(l.size, 8);
}

static void errors_name_the_problem(void **state)
{
    (void)state;
    eng_launch_t l;
    setenv("STRATA_COORD", "h:1", 1);
    assert_int_equal(detect(&l), STRATA_ERR_CONFIG);
    assert_non_null(strstr(last_error, "no launcher environment"));

    setenv("SLURM_PROCID", "x1", 1);
    setenv("SLURM_NTASKS", "4", 1);
    assert_int_equal(detect(&l), STRATA_ERR_CONFIG);
    assert_non_null(strstr(last_error, "SLURM_PROCID='x1'"));

    setenv("SLURM_PROCID", "4", 1);
    assert_int_equal(detect(&l), STRATA_ERR_CONFIG);
    assert_non_null(strstr(last_error, "rank 4 (from SLURM_PROCID)"));

    setenv("SLURM_PROCID", "1", 1);
    setenv("STRATA_NUM_AGGREGATORS", "4", 1);
    assert_int_equal(detect(&l), STRATA_ERR_CONFIG);
    assert_non_null(strstr(last_error, "leaves no worker"));

    setenv("STRATA_NUM_AGGREGATORS", "1", 1);
    unsetenv("STRATA_COORD");
    assert_int_equal(detect(&l), STRATA_ERR_CONFIG);
    assert_non_null(strstr(last_error, "no coordinator address"));

    setenv("MASTER_ADDR", "h", 1);
    setenv("MASTER_PORT", "65535", 1);
    assert_int_equal(detect(&l), STRATA_ERR_CONFIG);
    assert_non_null(strstr(last_error, "MASTER_PORT+1"));
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
    assert_non_null(strstr(last_error, "is not a socket"));
    close(p[0]), close(p[1]), close(sv[0]), close(sv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(explicit_settings, setup, teardown),
        cmocka_unit_test_setup_teardown(open_mpi_wins_over_slurm, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(slurm, setup, teardown),
        cmocka_unit_test_setup_teardown(pmix_takes_size_from_slurm_or_strata,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            torchrun_coordinator_is_master_port_plus_one, setup, teardown),
        cmocka_unit_test_setup_teardown(explicit_rank_overrides_launcher, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(errors_name_the_problem, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(launcher_socket, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
