/*
 * Messages of the training driver. It is an example program built on the
 * public API only, so it keeps its own one-line messages on stderr instead
 * of the engine's internal logger.
 */
#ifndef STRATA_PERF_TRAIN_LOG_H
#define STRATA_PERF_TRAIN_LOG_H

void perf_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void perf_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prefix of every message ("strata-train" by default; workers add a rank). */
void perf_log_set_prefix(const char *prefix);

#endif /* STRATA_PERF_TRAIN_LOG_H */
