/* One line per message on stderr, prefixed with the program and role. */
#include <stdarg.h>
#include <stdio.h>

#include "perf/train/log.h"

static char log_prefix[64] = "strata-train";

void perf_log_set_prefix(const char *prefix)
{
    snprintf(log_prefix, sizeof(log_prefix), "%s", prefix);
}

static void log_line(const char *level, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    /* One fprintf per line so lines of concurrent processes do not mix. */
    fprintf(stderr, "%s: %s: %s\n", log_prefix, level, msg);
}

void perf_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_line("error", fmt, ap);
    va_end(ap);
}

void perf_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_line("warning", fmt, ap);
    va_end(ap);
}
