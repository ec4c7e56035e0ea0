/*
 * Logging for every module: one line per message on stderr (or a sink set by
 * a test), with a UTC timestamp, the process id, the rank once known, the
 * level and the source location. The level comes from STRATA_LOG.
 */
#ifndef STRATA_UTIL_LOG_H
#define STRATA_UTIL_LOG_H

#include <stdatomic.h>

typedef enum util_log_level {
    UTIL_LOG_ERROR,
    UTIL_LOG_WARN,
    UTIL_LOG_INFO,
    UTIL_LOG_DEBUG,
    UTIL_LOG_TRACE,
} util_log_level_t;

/* "error", "warn", "info", "debug", "trace", NULL: indexed by level. */
extern const char *const util_log_level_names[];

/* Threshold read by the macros; negative until the first message or
 * util_log_set_level(). Use the macros, not this. */
extern _Atomic int util_log_threshold;

void util_log_set_level(util_log_level_t level);
util_log_level_t util_log_get_level(void);
/* Parse a level name; returns -1 when the name is not one of the levels. */
int util_log_parse_level(const char *name);

/* Rank shown in every line from now on (-1: not known yet). */
void util_log_set_rank(int rank);

/* Replace the output: every formatted line (without newline) goes to fn.
 * NULL restores stderr. For tests and for frameworks with their own logs. */
typedef void (*util_log_sink_fn)(void *arg, util_log_level_t level,
                                 const char *line);
void util_log_set_sink(util_log_sink_fn fn, void *arg);

/* The message (without the line's prefix) of the last ERROR this thread
 * logged, or "" if none. */
const char *util_log_thread_last_error(void);

void util_log_write(util_log_level_t level, const char *file, int line,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

int util_log_init_threshold(void);

static inline int util_log_enabled(util_log_level_t level)
{
    int t = atomic_load_explicit(&util_log_threshold, memory_order_relaxed);
    if (t < 0)
        t = util_log_init_threshold();
    return (int)level <= t;
}

#define util_log(level, ...)                                                   \
    do {                                                                       \
        if (util_log_enabled(level))                                           \
            util_log_write(level, __FILE__, __LINE__, __VA_ARGS__);            \
    } while (0)

#define util_error(...) util_log(UTIL_LOG_ERROR, __VA_ARGS__)
#define util_warn(...) util_log(UTIL_LOG_WARN, __VA_ARGS__)
#define util_info(...) util_log(UTIL_LOG_INFO, __VA_ARGS__)
#define util_debug(...) util_log(UTIL_LOG_DEBUG, __VA_ARGS__)
#define util_trace(...) util_log(UTIL_LOG_TRACE, __VA_ARGS__)

#endif /* STRATA_UTIL_LOG_H */
