/*
 * strata-bench-transport --provider P (--server [--bind ADDR] |
 *                                      --connect ADDR | --loopback)
 * Write bandwidth and latency over message sizes, printed as a perftest-style
 * table and optionally written as JSON. Settings (STRATA_JOB_SECRET,
 * STRATA_TIMEOUT_MS, STRATA_TCP_CRC, ...) come from the environment.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "perf/transport/bench.h"
#include "util/log.h"
#include "util/parse.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: strata-bench-transport [--provider tcp|shm|verbs]\n"
            "         (--server [--bind ADDR] | --connect ADDR | --loopback)\n"
            "         [--sizes MIN:MAX] [--bw-only | --lat-only]\n"
            "         [--window N] [--iters N] [--poll spin|block] [--quick]\n"
            "         [--json FILE]\n"
            "Write bandwidth (decimal Gb/s of bytes landed at the peer) and\n"
            "one-way latency (half a write ping-pong) for sizes doubling\n"
            "from MIN to MAX (default 8:64M). --loopback forks a local\n"
            "server. --poll block sleeps on the provider's wait fd when idle\n"
            "(default: spin, as perftest). --iters N: N writes per size in\n"
            "each measurement, as perftest's -n (default: from the size);\n"
            "--quick runs a tenth of the default iterations.\n");
}

/* "64", "4K", "64M": bytes. */
static bool parse_size(const char *s, size_t *out)
{
    uint64_t v;
    if (!util_parse_size(s, &v) || v > (1ull << 32))
        return false;
    *out = (size_t)v;
    return true;
}

static bool parse_sizes(const char *s, perf_tp_opts_t *o)
{
    char lo[32];
    const char *colon = strchr(s, ':');
    if (!colon || (size_t)(colon - s) >= sizeof(lo))
        return false;
    memcpy(lo, s, (size_t)(colon - s));
    lo[colon - s] = '\0';
    return parse_size(lo, &o->min_size) &&
           parse_size(colon + 1, &o->max_size) && o->min_size > 0 &&
           o->min_size <= o->max_size;
}

/* One option; 0, or 2 for a bad value. */
static int parse_opt(int c, const char *arg, perf_tp_opts_t *o)
{
    switch (c) {
    case 'p':
        o->provider = arg;
        return 0;
    case 's':
        o->server = true;
        return 0;
    case 'b':
        o->bind = arg;
        return 0;
    case 'c':
        o->connect = arg;
        return 0;
    case 'l':
        o->loopback = true;
        return 0;
    case 'j':
        o->json = arg;
        return 0;
    case 'B':
        o->lat = false;
        return 0;
    case 'L':
        o->bw = false;
        return 0;
    case 'q':
        o->quick = true;
        return 0;
    case 'M':
        o->memcpy_baseline = true;
        return 0;
    case 'w':
        o->window = atoi(arg);
        return 0;
    case 'n':
        o->iters = strtoull(arg, NULL, 10);
        if (o->iters > 0)
            return 0;
        fprintf(stderr, "--iters %s: expected a positive count\n", arg);
        return 2;
    case 'P':
        perf_tp_block = strcmp(arg, "block") == 0;
        if (perf_tp_block || strcmp(arg, "spin") == 0)
            return 0;
        fprintf(stderr, "--poll %s: expected spin or block\n", arg);
        return 2;
    case 'z':
        if (parse_sizes(arg, o))
            return 0;
        fprintf(stderr, "--sizes %s: expected MIN:MAX such as 8:64M\n", arg);
        return 2;
    }
    usage(stderr);
    return 2;
}

static int parse_args(int argc, char **argv, perf_tp_opts_t *o)
{
    static const struct option longopts[] = {
        {"provider", required_argument, 0, 'p'},
        {"server", no_argument, 0, 's'},
        {"bind", required_argument, 0, 'b'},
        {"connect", required_argument, 0, 'c'},
        {"loopback", no_argument, 0, 'l'},
        {"json", required_argument, 0, 'j'},
        {"sizes", required_argument, 0, 'z'},
        {"bw-only", no_argument, 0, 'B'},
        {"lat-only", no_argument, 0, 'L'},
        {"window", required_argument, 0, 'w'},
        {"iters", required_argument, 0, 'n'},
        {"poll", required_argument, 0, 'P'},
        {"quick", no_argument, 0, 'q'},
        {"memcpy", no_argument, 0, 'M'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    *o = (perf_tp_opts_t){.provider = "tcp",
                          .bw = true,
                          .lat = true,
                          .min_size = 8,
                          .max_size = 64u << 20,
                          .window = 128};
    int c, rc;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 1;
        }
        if ((rc = parse_opt(c, optarg, o)) != 0)
            return rc;
    }
    if (optind != argc || o->server + !!o->connect + o->loopback != 1 ||
        o->window < 1 || (!o->bw && !o->lat)) {
        usage(stderr);
        return 2;
    }
    return 0;
}

static void print_header(const perf_tp_opts_t *o)
{
    printf("------------------------------------------------------------------"
           "---------------------------\n");
    printf(" Strata transport write benchmark, provider %s, window %d, "
           "polling: %s\n",
           o->provider, o->window, perf_tp_block ? "block" : "spin");
    printf(" %-10s %-8s %-12s %-13s %-7s %-11s %-9s %-9s%s\n", "#bytes",
           "#iters", "BW[Gb/sec]", "MsgRate[Mpps]", "#iters", "t_typ[usec]",
           "t_avg", "t_99%",
           o->memcpy_baseline ? " memcpy[Gb/sec]  BW/memcpy" : "");
}

static void print_row(const perf_tp_opts_t *o, const perf_tp_result_t *r)
{
    printf(" %-10zu %-8llu %-12.3f %-13.4f %-7llu %-11.2f %-9.2f %-9.2f",
           r->bytes, (unsigned long long)r->bw_iters, r->bw_gbps, r->mpps,
           (unsigned long long)r->lat_iters, r->lat_us, r->lat_avg_us,
           r->lat_p99_us);
    if (o->memcpy_baseline)
        printf(" %-15.3f %.0f%%", r->memcpy_gbps,
               100 * r->bw_gbps / r->memcpy_gbps);
    printf("\n");
    fflush(stdout);
}

static int write_json(const char *path, const char *provider,
                      const perf_tp_result_t *r, int n)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "--json %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, "{\"provider\": \"%s\", \"results\": [", provider);
    for (int i = 0; i < n; i++)
        fprintf(f,
                "%s\n  {\"bytes\": %zu, \"bw_gbps\": %.4f, \"lat_us\": %.3f}",
                i ? "," : "", r[i].bytes, r[i].bw_gbps, r[i].lat_us);
    fprintf(f, "\n]}\n");
    return fclose(f) == 0 ? 0 : -1;
}

static int run_client(const perf_tp_opts_t *o, const eng_config_t *cfg)
{
    perf_tp_conn_t c;
    perf_tp_result_t res[40];
    int n = 0, rc = 0;
    if (perf_tp_client_open(o, cfg, &c) != 0) {
        perf_tp_client_close(&c);
        return 1;
    }
    print_header(o);
    for (size_t b = o->min_size; b <= o->max_size && n < 40 && rc == 0;
         b *= 2, n++) {
        res[n] = (perf_tp_result_t){.bytes = b};
        if (o->bw)
            rc = perf_tp_measure_bw(&c, o, &res[n]);
        if (rc == 0 && o->lat)
            rc = perf_tp_measure_lat(&c, o, &res[n]);
        if (rc == 0 && o->memcpy_baseline)
            rc = perf_tp_measure_memcpy(o, &res[n]);
        if (rc == 0)
            print_row(o, &res[n]);
    }
    perf_tp_client_close(&c);
    if (rc == 0 && o->json)
        rc = write_json(o->json, o->provider, res, n);
    return rc != 0;
}

/* Forks a server on this host and connects to it. */
static int run_loopback(perf_tp_opts_t *o, const eng_config_t *cfg)
{
    int p[2];
    if (pipe(p) != 0)
        return 1;
    if (!o->bind)
        o->bind = "127.0.0.1:0";
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        close(p[0]);
        _exit(perf_tp_serve(o, cfg, p[1]));
    }
    close(p[1]);
    char addr[256];
    ssize_t n = read(p[0], addr, sizeof(addr) - 1);
    close(p[0]);
    int rc = 1;
    if (n > 0) {
        addr[n] = '\0';
        o->connect = addr;
        rc = run_client(o, cfg);
    }
    int status;
    waitpid(pid, &status, 0);
    return rc;
}

int main(int argc, char **argv)
{
    perf_tp_opts_t o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    eng_config_t *cfg = NULL;
    if (eng_config_load(&cfg) != STRATA_OK)
        return 2;
    if (o.server)
        rc = perf_tp_serve(&o, cfg, -1);
    else if (o.loopback)
        rc = run_loopback(&o, cfg);
    else
        rc = run_client(&o, cfg);
    eng_config_free(cfg);
    return rc;
}
