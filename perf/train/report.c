/* The comparison table, its JSON, and the gnuplot figure. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "perf/train/log.h"
#include "perf/train/report.h"

void perf_report_scenario(FILE *out, const perf_scenario_t *sc,
                          size_t train_count, double compute_s)
{
    fprintf(out, "scenario %s: %d workers (speeds", sc->name, sc->workers);
    for (int i = 0; i < sc->workers;) {
        int n = 1;
        while (i + n < sc->workers && sc->speeds[i + n] == sc->speeds[i])
            n++;
        fprintf(out, " x%g", sc->speeds[i]);
        if (n > 1)
            fprintf(out, "*%d", n);
        i += n;
    }
    fprintf(out, ")");
    for (int i = 0; i < sc->nchanges; i++)
        fprintf(out, "%s worker %d x%g from %g s", i ? "," : ";",
                sc->changes[i].worker, sc->changes[i].factor,
                sc->changes[i].at_s);
    if (sc->groups)
        fprintf(out, " in %d gssp groups", sc->groups);
    fprintf(out,
            ", %d aggregator%s; step %.1f ms at x1 (compute %.2f ms), "
            "batch %d, lr %g, %zu %s training samples; target %.2f, budget "
            "%.0f s\n",
            sc->aggregators, sc->aggregators > 1 ? "s" : "",
            sc->base_step_s * 1e3, compute_s * 1e3, sc->batch, sc->lr,
            train_count, sc->noniid ? "non-iid" : "iid", sc->target_acc,
            sc->budget_s);
}

static void human_bytes(uint64_t b, char *buf, size_t len)
{
    const char *unit[] = {"B", "KB", "MB", "GB", "TB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1000.0 && u < 4) {
        v /= 1000.0;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

static const perf_result_t *reference(const perf_result_t *r, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(r[i].policy, "bsp") == 0)
            return &r[i];
    return &r[0];
}

void perf_report_table(FILE *out, const perf_scenario_t *sc,
                       const perf_result_t *r, int n)
{
    const perf_result_t *ref = reference(r, n);
    char head[32];
    snprintf(head, sizeof(head), "time to %.2f", sc->target_acc);
    fprintf(out, "\n%-12s %12s %10s %9s %10s %10s %9s\n", "policy", head, "vs",
            "final acc", "pushed", "pulled", "steps");
    for (int i = 0; i < n; i++) {
        char ttt[32] = "not reached", speed[32] = "-", acc[16] = "-";
        char pushed[32], pulled[32];
        if (!isnan(r[i].time_to_target_s))
            snprintf(ttt, sizeof(ttt), "%.2f s", r[i].time_to_target_s);
        if (!isnan(r[i].time_to_target_s) && !isnan(ref->time_to_target_s) &&
            r[i].time_to_target_s > 0)
            snprintf(speed, sizeof(speed), "%.2fx",
                     ref->time_to_target_s / r[i].time_to_target_s);
        if (!isnan(r[i].final_acc))
            snprintf(acc, sizeof(acc), "%.4f", r[i].final_acc);
        human_bytes(r[i].bytes_pushed, pushed, sizeof(pushed));
        human_bytes(r[i].bytes_pulled, pulled, sizeof(pulled));
        fprintf(out, "%-12s %12s %10s %9s %10s %10s %9llu%s\n", r[i].policy,
                ttt, speed, acc, pushed, pulled, (unsigned long long)r[i].steps,
                r[i].ok ? "" : "  FAILED");
    }
    fprintf(out, "(vs: speed-up to %.2f over %s; final acc after %.0f s)\n",
            sc->target_acc, ref->policy, sc->budget_s);
    perf_report_changes(out, sc, r, n);
}

/* The accuracy of r's last evaluation at or before t (0 before any). */
static double acc_at(const perf_result_t *r, double t)
{
    double acc = 0;
    for (size_t k = 0; k < r->npoints && r->points[k].t_s <= t; k++)
        acc = r->points[k].acc;
    return acc;
}

/* The share of ref's evaluations at which r was at least as accurate. */
static double share_ahead(const perf_result_t *r, const perf_result_t *ref)
{
    size_t ahead = 0;
    for (size_t k = 0; k < ref->npoints; k++)
        ahead += acc_at(r, ref->points[k].t_s) >= ref->points[k].acc;
    return ref->npoints ? (double)ahead / (double)ref->npoints : 0;
}

void perf_report_changes(FILE *out, const perf_scenario_t *sc,
                         const perf_result_t *r, int n)
{
    const perf_result_t *ref = reference(r, n);
    for (int i = 0; i < sc->nchanges; i++) {
        const perf_speed_change_t *c = &sc->changes[i];
        fprintf(out, "speed change: worker %d x%g at %g s\n", c->worker,
                c->factor, c->at_s);
        for (int p = 0; p < n; p++) {
            const perf_change_seen_t *s = &r[p].changes[i];
            if (strncmp(r[p].policy, "gssp", 4) != 0)
                continue;
            if (s->moved)
                fprintf(out, "  %-12s moved from group %d to %d %.2f s later",
                        r[p].policy, s->from, s->to, s->after_s);
            else
                fprintf(out, "  %-12s never left group %d", r[p].policy,
                        s->from);
            if (ref != &r[p])
                fprintf(out,
                        "; as accurate as %s or more at %.0f%% of its "
                        "evaluations",
                        ref->policy, 100 * share_ahead(&r[p], ref));
            fprintf(out, "\n");
        }
    }
}

static void json_number(FILE *f, double v)
{
    if (isnan(v))
        fputs("null", f);
    else
        fprintf(f, "%.6g", v);
}

strata_status_t perf_report_json(const char *path, const perf_scenario_t *sc,
                                 const perf_result_t *r, int n)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perf_error("%s: cannot create: %s", path, strerror(errno));
        return STRATA_ERR_IO;
    }
    fprintf(f, "{\"scenario\": \"%s\", \"workers\": %d, \"aggregators\": %d, ",
            sc->name, sc->workers, sc->aggregators);
    fprintf(f, "\"target_acc\": %g, \"budget_s\": %g, \"results\": [",
            sc->target_acc, sc->budget_s);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s\n  {\"policy\": \"%s\", \"time_to_target_s\": ",
                i ? "," : "", r[i].policy);
        json_number(f, r[i].time_to_target_s);
        fputs(", \"final_acc\": ", f);
        json_number(f, r[i].final_acc);
        fprintf(f,
                ", \"bytes_pushed\": %llu, \"bytes_pulled\": %llu, "
                "\"steps\": %llu, \"ok\": %s",
                (unsigned long long)r[i].bytes_pushed,
                (unsigned long long)r[i].bytes_pulled,
                (unsigned long long)r[i].steps, r[i].ok ? "true" : "false");
        for (int c = 0; c < sc->nchanges; c++) {
            fprintf(f,
                    "%s{\"worker\": %d, \"at_s\": %g, \"factor\": %g, "
                    "\"moved_after_s\": ",
                    c ? ", " : ", \"speed_changes\": [", sc->changes[c].worker,
                    sc->changes[c].at_s, sc->changes[c].factor);
            json_number(f,
                        r[i].changes[c].moved ? r[i].changes[c].after_s : NAN);
            fprintf(f, "}%s", c + 1 == sc->nchanges ? "]" : "");
        }
        fputs("}", f);
    }
    fputs("\n]}\n", f);
    if (fclose(f) != 0) {
        perf_error("%s: cannot write: %s", path, strerror(errno));
        return STRATA_ERR_IO;
    }
    return STRATA_OK;
}

strata_status_t perf_report_check_output(const char *path, const char *option)
{
    struct stat sb;
    bool existed = stat(path, &sb) == 0;
    /* Not truncated: a run that fails keeps the results of the last one.
     * O_NONBLOCK: a FIFO without a reader is an error, not a wait. */
    int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) {
        perf_error("%s %s: cannot create: %s", option, path, strerror(errno));
        return STRATA_ERR_IO;
    }
    close(fd);
    if (!existed)
        unlink(path);
    return STRATA_OK;
}

/* The name goes into gnuplot's script between single quotes. */
static bool perf_report_plot_name_ok(const char *path)
{
    if (!strchr(path, '\''))
        return true;
    perf_error("%s: a plot file name cannot contain a quote", path);
    return false;
}

strata_status_t perf_report_check_plot(const char *path)
{
    if (!perf_report_plot_name_ok(path))
        return STRATA_ERR_INVALID;
    return perf_report_check_output(path, "--plot");
}

/* The script, with every curve inline so no temporary files are needed. */
static void plot_script(FILE *g, const char *path, const perf_scenario_t *sc,
                        const perf_result_t *r, int n)
{
    fprintf(g, "set terminal pngcairo size 900,560 noenhanced\n");
    fprintf(g, "set output '%s'\n", path);
    fprintf(g, "set title 'Fashion-MNIST MLP, scenario %s: test accuracy'\n",
            sc->name);
    fprintf(g, "set xlabel 'wall time (s)'\nset ylabel 'test accuracy'\n");
    fprintf(g, "set key bottom right\nset grid\nset yrange [0:1]\n");
    for (int i = 0; i < n; i++) {
        fprintf(g, "$p%d << EOD\n", i);
        for (size_t k = 0; k < r[i].npoints; k++)
            fprintf(g, "%.3f %.4f\n", r[i].points[k].t_s, r[i].points[k].acc);
        fprintf(g, "EOD\n");
    }
    fprintf(g, "plot %g with lines dashtype 2 lc 'gray' title 'target %.2f'",
            sc->target_acc, sc->target_acc);
    for (int i = 0; i < n; i++)
        if (r[i].npoints)
            fprintf(g, ", $p%d with lines lw 2 title '%s'", i, r[i].policy);
    fprintf(g, "\n");
}

bool perf_report_have_gnuplot(void)
{
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", path ? path : "/usr/bin:/bin");
    char *save = NULL;
    for (char *dir = strtok_r(buf, ":", &save); dir;
         dir = strtok_r(NULL, ":", &save)) {
        char exe[4200];
        snprintf(exe, sizeof(exe), "%s/gnuplot", dir);
        if (access(exe, X_OK) == 0)
            return true;
    }
    return false;
}

strata_status_t perf_report_plot(const char *path, const perf_scenario_t *sc,
                                 const perf_result_t *r, int n)
{
    if (!perf_report_plot_name_ok(path))
        return STRATA_ERR_INVALID;
    FILE *g = popen("gnuplot", "w");
    if (!g) {
        perf_error("cannot run gnuplot: %s", strerror(errno));
        return STRATA_ERR_IO;
    }
    plot_script(g, path, sc, r, n);
    int status = pclose(g);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        perf_error("gnuplot failed to draw %s (exit status %d; is "
                   "gnuplot-nox installed?)",
                   path, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return STRATA_ERR_IO;
    }
    return STRATA_OK;
}
