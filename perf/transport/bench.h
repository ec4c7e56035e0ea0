/*
 * strata-bench-transport: write bandwidth and latency of a transport
 * provider over message sizes, in the manner of perftest's ib_write_bw and
 * ib_write_lat. The client drives; the server owns the target region and
 * answers: the last write of a bandwidth run with a message (so the time
 * covers every byte landing, not just leaving), each latency ping with a
 * write of the same size back.
 */
#ifndef STRATA_PERF_TRANSPORT_BENCH_H
#define STRATA_PERF_TRANSPORT_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/config.h"
#include "transport/transport.h"

/* Immediates of the benchmark's writes. */
#define PERF_IMM_BW_LAST (1u << 31) /* answer with a message */
#define PERF_IMM_LAT (1u << 30)     /* answer with a write back */

typedef struct perf_tp_opts {
    const char *provider;
    const char *bind;    /* server: where to listen */
    const char *connect; /* client: the server's address */
    const char *json;    /* client: results as JSON here */
    bool server, loopback, quick;
    bool memcpy_baseline; /* also time memcpy of the same sizes */
    bool bw, lat;
    size_t min_size, max_size;
    int window;     /* writes in flight in a bandwidth run */
    uint64_t iters; /* per size and measurement, 0: from the size */
} perf_tp_opts_t;

typedef struct perf_tp_result {
    size_t bytes;
    uint64_t bw_iters, lat_iters;
    double bw_gbps; /* decimal Gb/s of bytes landed */
    double mpps;    /* writes per second, millions */
    double lat_us;  /* one-way latency, median of ping-pongs */
    double lat_avg_us;
    double lat_p99_us;
    double memcpy_gbps; /* --memcpy: one core copying the same bytes */
} perf_tp_result_t;

/* A connected endpoint with the peer's region described. */
typedef struct perf_tp_conn {
    tp_ctx_t *ctx;
    tp_ep_t *ep;
    tp_mr_t *mr; /* ours: source of writes, target of the answers */
    tp_rdesc_t peer;
} perf_tp_conn_t;

/* Waits for the next event, busy-polling (or sleeping on the wait fd when
 * perf_tp_block); false after timeout_ms. */
extern bool perf_tp_block;
bool perf_tp_next(tp_ctx_t *ctx, tp_event_t *ev, int timeout_ms);
tp_ctx_t *perf_tp_open(const char *provider, const eng_config_t *cfg);

/* Serves one client until it disconnects. addr_fd >= 0: the listener's
 * address is written there (for --loopback), else printed. */
int perf_tp_serve(const perf_tp_opts_t *o, const eng_config_t *cfg,
                  int addr_fd);
/* Connects, exchanges region descriptors. */
int perf_tp_client_open(const perf_tp_opts_t *o, const eng_config_t *cfg,
                        perf_tp_conn_t *c);
void perf_tp_client_close(perf_tp_conn_t *c);

int perf_tp_measure_bw(perf_tp_conn_t *c, const perf_tp_opts_t *o,
                       perf_tp_result_t *r);
int perf_tp_measure_lat(perf_tp_conn_t *c, const perf_tp_opts_t *o,
                        perf_tp_result_t *r);
/* memcpy of r->bytes between two warm buffers of max_size, as often as the
 * bandwidth run wrote. */
int perf_tp_measure_memcpy(const perf_tp_opts_t *o, perf_tp_result_t *r);

#endif /* STRATA_PERF_TRANSPORT_BENCH_H */
