/* Line-oriented logging; see log.h. Messages are formatted into one buffer
 * and written with a single write(2), so lines from threads never interleave.
 */
#include "util/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define UTIL_LOG_DEFAULT UTIL_LOG_WARN
#define UTIL_LOG_LINE_MAX 2048

const char *const util_log_level_names[] = {"error", "warn",  "info",
                                            "debug", "trace", NULL};
static const char *const util_log_level_tags[] = {"ERROR", "WARN ", "INFO ",
                                                  "DEBUG", "TRACE"};

_Atomic int util_log_threshold = -1;
static _Atomic int util_log_rank = -1;

static pthread_mutex_t util_log_sink_lock = PTHREAD_MUTEX_INITIALIZER;
/* For bindings: what the last failing call of this thread said. */
static _Thread_local char util_log_last_error[512];
static util_log_sink_fn util_log_sink;
static void *util_log_sink_arg;

int util_log_parse_level(const char *name)
{
    for (int i = 0; name && util_log_level_names[i]; i++)
        if (strcasecmp(name, util_log_level_names[i]) == 0)
            return i;
    return -1;
}

/* First use before the configuration is loaded: take STRATA_LOG as is. A bad
 * value falls back to the default here; the config module reports it. */
int util_log_init_threshold(void)
{
    int level = util_log_parse_level(getenv("STRATA_LOG"));
    if (level < 0)
        level = UTIL_LOG_DEFAULT;
    int expected = -1;
    atomic_compare_exchange_strong(&util_log_threshold, &expected, level);
    return atomic_load(&util_log_threshold);
}

void util_log_set_level(util_log_level_t level)
{
    atomic_store(&util_log_threshold, (int)level);
}

util_log_level_t util_log_get_level(void)
{
    int t = atomic_load(&util_log_threshold);
    return (util_log_level_t)(t < 0 ? util_log_init_threshold() : t);
}

void util_log_set_rank(int rank)
{
    atomic_store(&util_log_rank, rank);
}

void util_log_set_sink(util_log_sink_fn fn, void *arg)
{
    pthread_mutex_lock(&util_log_sink_lock);
    util_log_sink = fn;
    util_log_sink_arg = arg;
    pthread_mutex_unlock(&util_log_sink_lock);
}

const char *util_log_thread_last_error(void)
{
    return util_log_last_error;
}

static size_t util_log_prefix(char *buf, size_t cap, util_log_level_t level,
                              const char *file, int line)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);

    int rank = atomic_load_explicit(&util_log_rank, memory_order_relaxed);
    char who[32];
    if (rank >= 0)
        snprintf(who, sizeof(who), "strata[%d] rank %d", (int)getpid(), rank);
    else
        snprintf(who, sizeof(who), "strata[%d]", (int)getpid());

    int n =
        snprintf(buf, cap, "%s.%06ldZ %s %s %s:%d: ", when, ts.tv_nsec / 1000,
                 who, util_log_level_tags[level], file, line);
    return n < 0 ? 0 : ((size_t)n < cap ? (size_t)n : cap - 1);
}

void util_log_write(util_log_level_t level, const char *file, int line,
                    const char *fmt, ...)
{
    if (level > UTIL_LOG_TRACE)
        level = UTIL_LOG_TRACE;
    char buf[UTIL_LOG_LINE_MAX];
    size_t len = util_log_prefix(buf, sizeof(buf) - 1, level, file, line);
    size_t prefix = len;

    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + len, sizeof(buf) - 1 - len, fmt, ap);
    va_end(ap);
    if (n > 0)
        len += (size_t)n < sizeof(buf) - 1 - len ? (size_t)n
                                                 : sizeof(buf) - 2 - len;
    /* One message, one line: a newline inside would break log parsers. */
    for (size_t i = 0; i < len; i++)
        if (buf[i] == '\n')
            buf[i] = ' ';
    if (level == UTIL_LOG_ERROR)
        snprintf(util_log_last_error, sizeof(util_log_last_error), "%.*s",
                 (int)(len - prefix), buf + prefix);

    pthread_mutex_lock(&util_log_sink_lock);
    util_log_sink_fn sink = util_log_sink;
    if (sink) {
        buf[len] = '\0';
        sink(util_log_sink_arg, level, buf);
    }
    pthread_mutex_unlock(&util_log_sink_lock);
    if (!sink) {
        buf[len++] = '\n';
        ssize_t w = write(STDERR_FILENO, buf, len);
        (void)w; /* nowhere left to report a failed log write */
    }
}
