/*
 * Fuzz the reassembly of a layout from a member's LAYOUT and TENSORS
 * messages (engine/layout_wire.c), as the coordinator and the aggregators
 * read them. Input: messages of [length: u16 LE][type u16 LE, body]. Each
 * is taken or refused; once complete, the layout holds exactly the
 * announced tensors, hashing to the announced hash, and it lays out (or
 * is refused, naming why) without fault.
 */
#include <stdint.h>
#include <stdlib.h>

#include "engine/layout.h"
#include "engine/layout_wire.h"
#include "util/log.h"

static void quiet(void *arg, util_log_level_t level, const char *line)
{
    (void)arg, (void)level, (void)line;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    util_log_set_sink(quiet, NULL);
    eng_layout_rx_t rx = {0};
    for (size_t i = 0; i + 2 <= size && !rx.complete;) {
        size_t len = (size_t)data[i] | (size_t)data[i + 1] << 8;
        i += 2;
        if (len > size - i)
            len = size - i;
        eng_rbuf_t r;
        unsigned type;
        eng_rbuf_init(&r, data + i, len, &type);
        i += len;
        if (type != ENG_MSG_LAYOUT && type != ENG_MSG_TENSORS)
            continue; /* the handlers only pass these */
        if (eng_layout_rx_msg(&rx, type, &r, "the fuzzer") != STRATA_OK)
            break;
    }
    if (rx.complete) {
        if (rx.nreceived != rx.ntensors ||
            eng_layout_hash(rx.tensors, rx.ntensors, rx.partition_bytes) !=
                rx.hash)
            abort();
        /* Any dtype and name, as a member may send them; sizes bounded
         * so that a layout fits in the fuzzer's memory. */
        bool small = rx.partition_bytes <= 1u << 26;
        for (uint32_t t = 0; t < rx.ntensors && small; t++)
            small = rx.tensors[t].count <= 1u << 20;
        eng_layout_t *lay = NULL;
        if (small && eng_layout_build(rx.tensors, rx.ntensors,
                                      rx.partition_bytes, 2, &lay) == STRATA_OK)
            eng_layout_free(lay);
    }
    eng_layout_rx_free(&rx);
    return 0;
}
