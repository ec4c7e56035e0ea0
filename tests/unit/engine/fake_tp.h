/*
 * A fake transport provider (the ops table of transport/provider.h) for
 * driving the engine's roles in one process and one thread. A write copies
 * into the target region at once and queues its arrival on the peer's
 * context; a send queues the message; every post completes at once. A
 * connect finds the listener by address (any context of the process), and
 * the pair reports ACCEPTED and CONNECTED. It calls itself "tcp" and, like
 * tcp, lets peers write into any registered memory.
 *
 * Tests break things through it: a whole process dying, an arrival
 * delivered twice.
 */
#ifndef STRATA_TESTS_FAKE_TP_H
#define STRATA_TESTS_FAKE_TP_H

#include <stdbool.h>

#include <strata/strata.h>

#include "transport/transport.h"

tp_ctx_t *fake_tp_open(void);

/* The process owning ctx died: the peer of each of its endpoints sees it
 * disconnect (STRATA_ERR_PEER), and ctx itself reports nothing more. */
void fake_tp_break(tp_ctx_t *ctx);

/* Report once more the last write with immediate ctx reported, as if the
 * peer had written it again; false if there was none. */
bool fake_tp_replay_imm(tp_ctx_t *ctx);

/* A rank of a job over fake transports: created from settings (RANK=...,
 * as strata_init_with takes them), prepared to join and its loop ready, as
 * one job with every other such rank of the process; NULL (logged) when a
 * step fails. Joins as its loop turns (eng_loop_once). */
strata_ctx_t *fake_tp_rank(const char *const *settings);

#endif /* STRATA_TESTS_FAKE_TP_H */
