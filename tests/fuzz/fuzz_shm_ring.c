/* Fuzz the shm ring consumer with rings a broken or hostile peer wrote: any
 * head index and record bytes are either consumed within the ring or
 * refused, never read out of bounds (ASan) and never looped on forever. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/shm/ring.h"
#include "transport/transport.h"

#define FUZZ_CAP 8192

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t *map;
    if (!map)
        map = aligned_alloc(4096, tp_shm_ring_bytes(FUZZ_CAP));
    memset(map, 0, tp_shm_ring_bytes(FUZZ_CAP));
    uint64_t head = 0;
    if (size >= 8) {
        memcpy(&head, data, 8);
        data += 8, size -= 8;
    }
    memcpy(map + TP_SHM_RING_DATA, data, size < FUZZ_CAP ? size : FUZZ_CAP);
    tp_shm_ring_hdr_t *hdr = (tp_shm_ring_hdr_t *)map;
    atomic_store(&hdr->head, head % (2 * FUZZ_CAP)); /* sometimes too far */
    tp_shm_ring_t rx;
    tp_shm_ring_attach(&rx, map, FUZZ_CAP);
    for (int records = 0;; records++) {
        tp_shm_rec_t rec;
        const uint8_t *payload;
        bool got;
        const char *why = NULL;
        if (tp_shm_ring_peek(&rx, &rec, &payload, &got, &why) != STRATA_OK) {
            if (!why)
                abort();
            return 0;
        }
        if (!got)
            break;
        if (records > FUZZ_CAP / 16 || payload < map + TP_SHM_RING_DATA ||
            (rec.type == TP_SHM_REC_MSG &&
             (rec.len > TP_MSG_MAX ||
              payload + rec.len > map + tp_shm_ring_bytes(FUZZ_CAP))))
            abort();
        volatile uint8_t sink =
            rec.len ? payload[rec.type == TP_SHM_REC_MSG ? rec.len - 1 : 0] : 0;
        (void)sink;
        tp_shm_ring_next(&rx, &rec);
    }
    tp_shm_ring_release(&rx);
    return 0;
}
