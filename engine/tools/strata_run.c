/*
 * strata-run: start a whole job on this machine. Ranks 0..A-1 aggregate
 * (strata-agg, or PROGRAM with --spmd), ranks A..A+N-1 run PROGRAM as
 * workers. The ranks find the coordinator through a file in a private
 * temporary directory and prove a fresh random job secret.
 *
 * The launcher follows the engine: when a rank fails, the others are not
 * stopped at once. Rank 0 says on a socket (STRATA_LAUNCHER_FD) which ranks
 * left and which workers the job goes on without (esync and fedavg drop a
 * dead worker); a failure of such a rank leaves the job running. Otherwise
 * the engine tells every rank why the job failed and each ends on its own;
 * whatever still runs STRATA_TIMEOUT_MS plus a grace after the failure is
 * stopped (SIGTERM, then SIGKILL). strata-run exits with the status of the
 * first rank that failed, a worker the job went on without aside.
 *
 * With --spares N, the last N aggregator ranks are spares (strata-agg
 * --spare): they hold no shard and take over that of an aggregator lost.
 *
 * With --restart N, a worker that died and that the job went on without is
 * started again (N times in all): the new process rejoins the running job
 * in its place (every policy takes workers back).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/config.h"

/* After a failure, on top of STRATA_TIMEOUT_MS, for the others to end on
 * their own; and between SIGTERM and SIGKILL. */
#define GRACE_MS 3000

typedef struct job {
    int workers, aggs, size;
    int spares; /* --spares: the last aggregator ranks are spares */
    bool spmd;
    int restarts; /* --restart: workers still to start again */
    char **argv;  /* PROGRAM ARGS */
    char agg_path[PATH_MAX];
    char dir[64];
    pid_t *pids;
    int running;
    int64_t timeout_ms; /* STRATA_TIMEOUT_MS, as the ranks read it */
    int sock[2];        /* the launcher socket: [0] read here, [1] ranks' */
    /* per rank */
    int *code;     /* exit code, -1 while it runs */
    bool *left;    /* rank 0 says: it said goodbye */
    bool *dropped; /* rank 0 says: the job goes on without it */
    /* supervising */
    int nexits;          /* ranks exited so far, for the order */
    int *exit_seq;       /* [size]: in which order they exited */
    uint64_t stop_at_ns; /* 0, or when to stop the ranks still running */
    bool stopping, killed;
} job_t;

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: strata-run [-n WORKERS] [-a AGGREGATORS] [--spares N] "
        "[--spmd] -- PROGRAM [ARGS...]\n"
        "Runs a Strata job on this machine: AGGREGATORS ranks of "
        "strata-agg (default 1)\nand WORKERS ranks of PROGRAM (default "
        "1).\n"
        "  -n, --workers N       worker ranks\n"
        "  -a, --aggregators N   aggregator ranks (STRATA_NUM_AGGREGATORS)\n"
        "      --spares N        the last N of them are spares (strata-agg "
        "--spare): they hold\n                        no shard and take "
        "over that of an aggregator lost\n                        (needs "
        "STRATA_PROTECT_EVERY)\n"
        "      --spmd            aggregator ranks run PROGRAM too (it "
        "calls strata_serve\n                        when strata_init "
        "makes it an aggregator)\n"
        "      --restart N       start a worker that died and that the job "
        "went on without\n                        again, N times in all: "
        "it rejoins the running job in its\n                        place "
        "(every policy)\n"
        "Every rank gets STRATA_RANK, STRATA_SIZE, STRATA_LOCAL_RANK, "
        "STRATA_NUM_AGGREGATORS,\na coordinator file and a fresh job "
        "secret; other STRATA_* settings pass through.\n");
}

static int parse_count(const char *s, const char *what)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 1 || v > 4096) {
        fprintf(stderr, "strata-run: %s '%s' is not a number in [1, 4096]\n",
                what, s);
        return -1;
    }
    return (int)v;
}

static int parse_args(int argc, char **argv, job_t *job)
{
    static const struct option opts[] = {
        {"workers", required_argument, NULL, 'n'},
        {"aggregators", required_argument, NULL, 'a'},
        {"spmd", no_argument, NULL, 's'},
        {"restart", required_argument, NULL, 'r'},
        {"spares", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *job = (job_t){.workers = 1, .aggs = 1};
    int c;
    while ((c = getopt_long(argc, argv, "+n:a:h", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            job->workers = parse_count(optarg, "the number of workers");
            break;
        case 'a':
            job->aggs = parse_count(optarg, "the number of aggregators");
            break;
        case 's':
            job->spmd = true;
            break;
        case 'r':
            job->restarts = parse_count(optarg, "the number of restarts");
            break;
        case 'p':
            job->spares = parse_count(optarg, "the number of spares");
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
        if (job->workers < 0 || job->aggs < 0 || job->restarts < 0 ||
            job->spares < 0)
            return -1;
    }
    if (job->spares >= job->aggs) {
        fprintf(stderr,
                "strata-run: --spares %d of %d aggregators: at least one "
                "must hold the model\n",
                job->spares, job->aggs);
        return -1;
    }
    if (optind >= argc) {
        fprintf(stderr, "strata-run: no PROGRAM given\n");
        usage(stderr);
        return -1;
    }
    job->argv = argv + optind;
    job->size = job->workers + job->aggs;
    return 0;
}

/* strata-agg lives next to strata-run. */
static int find_agg(job_t *job)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n < 0) {
        fprintf(stderr, "strata-run: cannot find my own path: %s\n",
                strerror(errno));
        return -1;
    }
    self[n] = '\0';
    snprintf(job->agg_path, sizeof(job->agg_path), "%s/strata-agg",
             dirname(self));
    if (access(job->agg_path, X_OK) != 0) {
        fprintf(stderr,
                "strata-run: %s: %s (it must sit beside strata-run; or use "
                "--spmd)\n",
                job->agg_path, strerror(errno));
        return -1;
    }
    return 0;
}

/* A private directory with the coordinator file and, unless the caller set
 * one, a fresh 256-bit job secret readable by this user only. */
static int make_dir(job_t *job)
{
    snprintf(job->dir, sizeof(job->dir), "/tmp/strata-run.XXXXXX");
    if (!mkdtemp(job->dir)) {
        fprintf(stderr, "strata-run: mkdtemp: %s\n", strerror(errno));
        return -1;
    }
    if (getenv("STRATA_JOB_SECRET") || getenv("STRATA_JOB_SECRET_FILE"))
        return 0;
    unsigned char key[32];
    if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
        fprintf(stderr, "strata-run: getrandom: %s\n", strerror(errno));
        return -1;
    }
    char path[96], hex[65];
    for (size_t i = 0; i < sizeof(key); i++)
        snprintf(hex + 2 * i, 3, "%02x", key[i]);
    snprintf(path, sizeof(path), "%s/secret", job->dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || write(fd, hex, 64) != 64 || close(fd) != 0) {
        fprintf(stderr, "strata-run: writing %s: %s\n", path, strerror(errno));
        return -1;
    }
    setenv("STRATA_JOB_SECRET_FILE", path, 1);
    return 0;
}

static void remove_dir(const job_t *job)
{
    char path[96];
    snprintf(path, sizeof(path), "%s/secret", job->dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/coord", job->dir);
    unlink(path);
    rmdir(job->dir);
}

static void set_int(const char *name, int v)
{
    char buf[16];
    snprintf(buf, sizeof(buf), "%d", v);
    setenv(name, buf, 1);
}

static void start_rank(job_t *job, int rank)
{
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "strata-run: fork: %s\n", strerror(errno));
        return;
    }
    if (pid > 0) {
        job->pids[rank] = pid;
        job->running++;
        return;
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    set_int("STRATA_RANK", rank);
    set_int("STRATA_SIZE", job->size);
    set_int("STRATA_LOCAL_RANK", rank);
    set_int("STRATA_NUM_AGGREGATORS", job->aggs);
    bool agg = rank < job->aggs && !job->spmd;
    bool spare = rank < job->aggs && rank >= job->aggs - job->spares;
    if (spare && job->spmd)
        setenv("STRATA_SPARE", "1", 1);
    char *agg_argv[] = {job->agg_path, spare ? "--spare" : NULL, NULL};
    char **argv = agg ? agg_argv : job->argv;
    execvp(argv[0], argv);
    fprintf(stderr, "strata-run: cannot run %s: %s\n", argv[0],
            strerror(errno));
    _exit(127);
}

static int rank_of(const job_t *job, pid_t pid)
{
    for (int r = 0; r < job->size; r++)
        if (job->pids[r] == pid)
            return r;
    return -1;
}

static void signal_all(job_t *job, int sig)
{
    for (int r = 0; r < job->size; r++)
        if (job->pids[r] > 0)
            kill(job->pids[r], sig);
}

static int exit_code(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const char *role_of(const job_t *job, int r)
{
    return r < job->aggs ? "aggregator" : "worker";
}

/* Whether a rank's failure still holds the job: it failed, and the job
 * did not go on without it. */
static bool holds(const job_t *job, int r)
{
    return job->code[r] > 0 && !job->dropped[r] && !job->left[r];
}

/* The others end on their own (the engine tells them why the job failed)
 * or are stopped later; a failure the engine goes on from stops nothing. */
static void update_deadline(job_t *job)
{
    bool any = false;
    for (int r = 0; r < job->size; r++)
        any |= holds(job, r);
    if (!any)
        job->stop_at_ns = 0;
    else if (!job->stop_at_ns)
        job->stop_at_ns =
            now_ns() + (uint64_t)(job->timeout_ms + GRACE_MS) * 1000000u;
}

/* A rank failed; the first failure that holds the job also says what
 * happens next. */
static void report(const job_t *job, int r, pid_t pid, int status, bool first)
{
    const char *then = job->dropped[r] ? "; the job goes on without it"
                       : job->left[r]  ? "; it had left the job"
                       : first ? "; the others end once the engine tells "
                                 "them why, or are stopped"
                               : "";
    fprintf(stderr, "strata-run: rank %d (%s, pid %d) %s %d%s\n", r,
            role_of(job, r), (int)pid,
            WIFEXITED(status) ? "exited with status" : "was killed by signal",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), then);
}

/* --restart: a worker that died and that the job went on without is
 * started again, to rejoin in its place. */
static void restart(job_t *job, int r)
{
    if (job->restarts == 0 || r < job->aggs || !job->dropped[r] ||
        job->pids[r] != 0 || job->code[r] <= 0 || job->stopping)
        return;
    job->restarts--;
    fprintf(stderr,
            "strata-run: starting rank %d (worker) again (--restart): it "
            "rejoins the job in its place\n",
            r);
    job->code[r] = -1;
    start_rank(job, r);
}

/* Reap what exited. */
static void reap(job_t *job)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        int r = rank_of(job, pid);
        if (r < 0)
            continue;
        job->pids[r] = 0;
        job->running--;
        job->code[r] = exit_code(status);
        /* A signal strata-run did not send is a cause, not a consequence:
         * it counts first, whoever was reaped before it. */
        job->exit_seq[r] =
            job->nexits++ -
            (WIFSIGNALED(status) && !job->stopping ? job->size : 0);
        if (job->code[r] != 0 && !job->stopping)
            report(job, r, pid, status, !job->stop_at_ns);
        update_deadline(job);
        restart(job, r);
    }
}

/* What rank 0 said: "left R", "dropped R", "rejoined R". */
static void hear(job_t *job)
{
    char line[64];
    ssize_t n;
    while ((n = recv(job->sock[0], line, sizeof(line) - 1, MSG_DONTWAIT)) > 0) {
        line[n] = '\0';
        int r = -1;
        if (sscanf(line, "rejoined %d", &r) == 1 && r >= 0 && r < job->size) {
            job->dropped[r] = false; /* its new process is in the job */
            continue;
        }
        bool dropped = sscanf(line, "dropped %d", &r) == 1;
        if (!dropped && sscanf(line, "left %d", &r) != 1)
            continue;
        if (r < 0 || r >= job->size)
            continue;
        job->dropped[r] |= dropped;
        job->left[r] |= !dropped;
        if (dropped && job->code[r] > 0)
            fprintf(stderr,
                    "strata-run: the job goes on without rank %d (%s): the "
                    "engine dropped it\n",
                    r, role_of(job, r));
        if (dropped)
            restart(job, r);
    }
    update_deadline(job);
}

/* The first failure in exit order that counts, a rank killed by a signal
 * from elsewhere before any (the others may end before it is reaped); a
 * worker the job went on without does not count. */
static int first_failure(const job_t *job)
{
    int first = -1;
    for (int r = 0; r < job->size; r++)
        if (job->code[r] > 0 && !job->dropped[r] &&
            (first < 0 || job->exit_seq[r] < job->exit_seq[first]))
            first = r;
    return first < 0 ? 0 : job->code[first];
}

static int poll_ms(const job_t *job)
{
    if (!job->stop_at_ns)
        return -1;
    uint64_t now = now_ns();
    return now >= job->stop_at_ns
               ? 0
               : (int)((job->stop_at_ns - now + 999999) / 1000000);
}

/* Sleeps in poll on the signals (SIGCHLD, SIGINT, SIGTERM, blocked and
 * read from sfd) and rank 0's socket until a rank exits, rank 0 speaks, a
 * signal comes or the deadline passes. Returns the exit code. */
static int supervise(job_t *job, int sfd)
{
    int sig_code = 0;
    for (;;) {
        hear(job);
        reap(job);
        if (job->running == 0)
            return sig_code ? sig_code : first_failure(job);
        struct pollfd fds[2] = {{.fd = sfd, .events = POLLIN},
                                {.fd = job->sock[0], .events = POLLIN}};
        int n = poll(fds, 2, poll_ms(job));
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "strata-run: poll: %s\n", strerror(errno));
            signal_all(job, SIGKILL);
            job->stopping = job->killed = true;
        }
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
            int sig = (int)si.ssi_signo;
            if (sig == SIGINT || sig == SIGTERM) {
                sig_code = sig_code ? sig_code : 128 + sig;
                signal_all(job, sig);
                job->stopping = true;
                job->stop_at_ns = now_ns() + GRACE_MS * 1000000ull;
            }
        }
        if (!job->stop_at_ns || now_ns() < job->stop_at_ns || job->killed)
            continue;
        if (!job->stopping) {
            fprintf(stderr,
                    "strata-run: ranks still run STRATA_TIMEOUT_MS=%lld plus "
                    "%d s after the first failure; stopping them\n",
                    (long long)job->timeout_ms, GRACE_MS / 1000);
            signal_all(job, SIGTERM);
            job->stopping = true;
            job->stop_at_ns = now_ns() + GRACE_MS * 1000000ull;
        } else {
            signal_all(job, SIGKILL);
            job->killed = true;
        }
    }
}

/* STRATA_TIMEOUT_MS as the ranks will read it (STRATA_CONFIG, then the
 * environment); the default if the settings do not load, which the ranks
 * then report themselves. */
static void quiet(void *arg, strata_log_level_t level, const char *line)
{
    (void)arg, (void)level, (void)line;
}

static int64_t rank_timeout_ms(void)
{
    eng_config_t *cfg = NULL;
    strata_log_set_handler(quiet, NULL);
    strata_status_t st = eng_config_load(&cfg);
    strata_log_set_handler(NULL, NULL);
    if (st != STRATA_OK && eng_config_defaults(&cfg) != STRATA_OK)
        return 30000;
    int64_t ms = eng_config_int(cfg, ENG_CFG_TIMEOUT_MS);
    eng_config_free(cfg);
    return ms;
}

/* The socket rank 0 tells this launcher about the job on: datagrams, one
 * line each; the ranks inherit the writing end. */
static int make_socket(job_t *job)
{
    if (socketpair(AF_UNIX, SOCK_DGRAM, 0, job->sock) != 0) {
        fprintf(stderr, "strata-run: socketpair: %s\n", strerror(errno));
        return -1;
    }
    fcntl(job->sock[0], F_SETFD, FD_CLOEXEC);
    fcntl(job->sock[0], F_SETFL, O_NONBLOCK);
    char fd[16];
    snprintf(fd, sizeof(fd), "%d", job->sock[1]);
    setenv("STRATA_LAUNCHER_FD", fd, 1);
    return 0;
}

static int alloc_job(job_t *job)
{
    size_t n = (size_t)job->size;
    job->pids = calloc(n, sizeof(pid_t));
    job->code = malloc(n * sizeof(int));
    job->exit_seq = calloc(n, sizeof(int));
    job->left = calloc(n, sizeof(bool));
    job->dropped = calloc(n, sizeof(bool));
    if (!job->pids || !job->code || !job->exit_seq || !job->left ||
        !job->dropped) {
        fprintf(stderr, "strata-run: out of memory for %d ranks\n", job->size);
        return -1;
    }
    for (size_t r = 0; r < n; r++)
        job->code[r] = -1;
    return 0;
}

static void free_job(job_t *job)
{
    free(job->pids);
    free(job->code);
    free(job->exit_seq);
    free(job->left);
    free(job->dropped);
}

int main(int argc, char **argv)
{
    job_t job;
    if (parse_args(argc, argv, &job) != 0)
        return 2;
    if (!job.spmd && find_agg(&job) != 0)
        return 2;
    if (alloc_job(&job) != 0 || make_dir(&job) != 0 || make_socket(&job) != 0)
        return 2;
    job.timeout_ms = rank_timeout_ms();
    char coord[96];
    snprintf(coord, sizeof(coord), "%s/coord", job.dir);
    if (!getenv("STRATA_COORD"))
        setenv("STRATA_COORD_FILE", coord, 1);
    if (!getenv("STRATA_HOST"))
        setenv("STRATA_HOST", "127.0.0.1", 1);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) {
        fprintf(stderr, "strata-run: signalfd: %s\n", strerror(errno));
        return 2;
    }
    for (int r = 0; r < job.size; r++)
        start_rank(&job, r);
    close(job.sock[1]); /* the ranks hold it */
    job.sock[1] = -1;
    unsetenv("STRATA_LAUNCHER_FD"); /* a worker started again is not rank 0 */
    int code = supervise(&job, sfd);
    close(sfd);
    close(job.sock[0]);
    remove_dir(&job);
    free_job(&job);
    return code;
}
