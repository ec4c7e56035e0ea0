/*
 * A layout on the wire: LAYOUT (hash, tensor count, partition size), then the
 * tensor descriptions in TENSORS chunks, each a control message. Workers send
 * theirs to the coordinator, which sends the accepted one to the aggregators.
 */
#ifndef STRATA_ENGINE_LAYOUT_WIRE_H
#define STRATA_ENGINE_LAYOUT_WIRE_H

#include "engine/layout.h"
#include "engine/msg.h"

/* Queue the whole layout to peer. */
strata_status_t eng_layout_send(eng_peer_t *peer,
                                const eng_tensor_desc_t *tensors, uint32_t n,
                                uint64_t partition_bytes);

/* Reassembles one layout from its messages. */
typedef struct eng_layout_rx {
    eng_tensor_desc_t *tensors; /* cap of them allocated, nreceived set */
    uint32_t ntensors, nreceived, cap;
    uint64_t hash, partition_bytes;
    bool started, complete;
} eng_layout_rx_t;

/* Feed a LAYOUT or TENSORS message. STRATA_ERR_PROTO (logged naming `from`)
 * for one that does not fit the layout so far, or whose tensors do not
 * hash to the announced hash. */
strata_status_t eng_layout_rx_msg(eng_layout_rx_t *rx, unsigned type,
                                  eng_rbuf_t *r, const char *from);
void eng_layout_rx_free(eng_layout_rx_t *rx);

#endif /* STRATA_ENGINE_LAYOUT_WIRE_H */
