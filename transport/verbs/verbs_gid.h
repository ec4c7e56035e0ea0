/*
 * Choosing the GID of a port: which address a RoCE port speaks from. Reads
 * the sysfs tree of the device (a root is passed, so that tests can use a
 * fake tree), because sysfs tells what ibv_query_gid does not: the RoCE
 * version of each entry, and whether the entry is usable in this network
 * namespace at all (reading its type fails with EINVAL when it is not).
 */
#ifndef STRATA_TRANSPORT_VERBS_GID_H
#define STRATA_TRANSPORT_VERBS_GID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <strata/strata.h>

#define TP_VERBS_SYSFS_ROOT "/sys/class/infiniband"

typedef enum tp_verbs_gid_type {
    TP_VERBS_GID_IB,      /* InfiniBand link layer */
    TP_VERBS_GID_ROCE_V1, /* "IB/RoCE v1" on an Ethernet port */
    TP_VERBS_GID_ROCE_V2, /* "RoCE v2": routable, UDP-encapsulated */
} tp_verbs_gid_type_t;

typedef struct tp_verbs_gid {
    int index;
    uint8_t raw[16];
    tp_verbs_gid_type_t type;
    bool ipv4;       /* ::ffff:a.b.c.d */
    bool link_local; /* fe80::/64 */
} tp_verbs_gid_t;

/* The GID index STRATA_IB_GID_INDEX gives for device dev: -1 for "auto" (or
 * a per-device list that does not name dev), else the index. The syntax was
 * checked when the configuration was loaded; anything else is
 * STRATA_ERR_CONFIG, logged. */
strata_status_t tp_verbs_gid_override(const char *spec, const char *dev,
                                      int *index_out);

/* The GID to use on dev's port: override (>= 0) if that entry is usable,
 * else for an InfiniBand port index 0, else the best usable RoCE entry: an
 * IPv4-mapped RoCE v2 GID first, then other global RoCE v2, then RoCE v1,
 * then link-local ones (which time out when routed). Entries whose type
 * cannot be read are skipped. STRATA_ERR_NO_DEVICE (logged) when no entry
 * is usable. */
strata_status_t tp_verbs_gid_select(const char *sysfs_root, const char *dev,
                                    int port, bool ethernet, int override,
                                    tp_verbs_gid_t *gid_out);

/* "fe80::1", "::ffff:198.18.0.1" style text of a GID (inet_ntop). */
void tp_verbs_gid_str(const tp_verbs_gid_t *gid, char *buf, size_t len);

#endif /* STRATA_TRANSPORT_VERBS_GID_H */
