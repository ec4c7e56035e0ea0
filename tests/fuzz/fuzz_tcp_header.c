/* Fuzz the tcp provider's frame header decoder: any 32 bytes decode or are
 * refused with a reason; what decodes re-encodes to the same bytes and
 * obeys the limits of its type, and the region check never overflows. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/auth.h"
#include "transport/tcp/wire.h"
#include "transport/transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t in[TP_TCP_HDR_LEN] = {0}, out[TP_TCP_HDR_LEN];
    memcpy(in, data, size < sizeof(in) ? size : sizeof(in));
    tp_tcp_hdr_t h;
    const char *why = NULL;
    if (tp_tcp_hdr_decode(in, &h, &why) != STRATA_OK) {
        if (!why || !*why)
            abort(); /* a refusal always says why */
        return 0;
    }
    tp_tcp_hdr_encode(&h, out);
    if (memcmp(in, out, sizeof(in)) != 0)
        abort();
    if ((h.type == TP_TCP_MSG && h.len > TP_MSG_MAX) ||
        (h.type == TP_TCP_AUTH && h.len > TP_AUTH_MSG_MAX) ||
        (h.type == TP_TCP_BYE && h.len != 0))
        abort();
    /* The region check against the rest of the input as a length. */
    uint64_t region = 0;
    if (size >= sizeof(in) + 8)
        memcpy(&region, data + sizeof(in), 8);
    if (tp_tcp_write_fits(&h, region) &&
        (h.off > region || h.off + h.len > region || h.off + h.len < h.off))
        abort();
    return 0;
}
