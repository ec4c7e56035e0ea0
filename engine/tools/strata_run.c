/*
 * strata-run: start a whole job on this machine. Ranks 0..A-1 aggregate
 * (strata-agg, or PROGRAM with --spmd), ranks A..A+N-1 run PROGRAM as
 * workers. The ranks find the coordinator through a file in a private
 * temporary directory and prove a fresh random job secret. When a rank
 * fails, the others are stopped and strata-run exits with its status.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define GRACE_MS 3000 /* between SIGTERM and SIGKILL */

typedef struct job {
    int workers, aggs, size;
    bool spmd;
    char **argv; /* PROGRAM ARGS */
    char agg_path[PATH_MAX];
    char dir[64];
    pid_t *pids;
    int running;
} job_t;

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: strata-run [-n WORKERS] [-a AGGREGATORS] [--spmd] -- "
        "PROGRAM [ARGS...]\n"
        "Runs a Strata job on this machine: AGGREGATORS ranks of "
        "strata-agg (default 1)\nand WORKERS ranks of PROGRAM (default "
        "1).\n"
        "  -n, --workers N       worker ranks\n"
        "  -a, --aggregators N   aggregator ranks (STRATA_NUM_AGGREGATORS)\n"
        "      --spmd            aggregator ranks run PROGRAM too (it "
        "calls strata_serve\n                        when strata_init "
        "makes it an aggregator)\n"
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
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
        if (job->workers < 0 || job->aggs < 0)
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
    char *agg_argv[] = {job->agg_path, NULL};
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

static void report(const job_t *job, int r, pid_t pid, int status)
{
    fprintf(stderr,
            "strata-run: rank %d (%s, pid %d) %s %d; stopping the other "
            "ranks\n",
            r, r < job->aggs ? "aggregator" : "worker", (int)pid,
            WIFEXITED(status) ? "exited with status" : "was killed by signal",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

/* Reap what exited; on the first failure, stop the others. */
static void reap(job_t *job, int *first, bool *stopping)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        int r = rank_of(job, pid);
        if (r < 0)
            continue;
        job->pids[r] = 0;
        job->running--;
        if (exit_code(status) != 0 && *first == 0) {
            *first = exit_code(status);
            report(job, r, pid, status);
            signal_all(job, SIGTERM);
            *stopping = true;
        }
    }
}

/* Sleeps in sigtimedwait (SIGCHLD, SIGINT, SIGTERM are blocked) until a
 * rank exits or a signal comes; after the first failure the others get
 * SIGTERM, then SIGKILL after a grace period. Returns the first failure's
 * exit code. */
static int supervise(job_t *job, const sigset_t *set)
{
    int first = 0;
    bool stopping = false, killed = false;
    for (;;) {
        reap(job, &first, &stopping);
        if (job->running == 0)
            return first;
        struct timespec grace = {GRACE_MS / 1000, 0};
        siginfo_t info;
        int sig = sigtimedwait(set, &info, stopping ? &grace : NULL);
        if (sig == SIGINT || sig == SIGTERM) {
            first = first ? first : 128 + sig;
            signal_all(job, sig);
            stopping = true;
        } else if (sig < 0 && errno == EAGAIN && !killed) {
            signal_all(job, SIGKILL);
            killed = true;
        }
    }
}

int main(int argc, char **argv)
{
    job_t job;
    if (parse_args(argc, argv, &job) != 0)
        return 2;
    if (!job.spmd && find_agg(&job) != 0)
        return 2;
    job.pids = calloc((size_t)job.size, sizeof(pid_t));
    if (!job.pids || make_dir(&job) != 0)
        return 2;
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
    for (int r = 0; r < job.size; r++)
        start_rank(&job, r);
    int code = supervise(&job, &set);
    remove_dir(&job);
    free(job.pids);
    return code;
}
