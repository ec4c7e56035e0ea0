/* GID selection from sysfs, and the STRATA_IB_GID_INDEX override. */
#include "transport/verbs/verbs_gid.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"

/* Largest GID table we scan; real tables hold at most a few hundred. */
#define TP_VERBS_GID_MAX 1024

strata_status_t tp_verbs_gid_override(const char *spec, const char *dev,
                                      int *index_out)
{
    if (!spec || !*spec || strcmp(spec, "auto") == 0) {
        *index_out = -1;
        return STRATA_OK;
    }
    char *end;
    long v = strtol(spec, &end, 10);
    if (end != spec && *end == '\0' && v >= 0 && v < TP_VERBS_GID_MAX) {
        *index_out = (int)v;
        return STRATA_OK;
    }
    /* dev:index,dev:index */
    size_t dlen = strlen(dev);
    for (const char *p = spec; *p;) {
        size_t item = strcspn(p, ",");
        const char *colon = memchr(p, ':', item);
        if (!colon || colon == p)
            goto bad;
        v = strtol(colon + 1, &end, 10);
        if (end != p + item || end == colon + 1 || v < 0 ||
            v >= TP_VERBS_GID_MAX)
            goto bad;
        if ((size_t)(colon - p) == dlen && memcmp(p, dev, dlen) == 0) {
            *index_out = (int)v;
            return STRATA_OK;
        }
        p += item + (p[item] == ',');
    }
    *index_out = -1;
    return STRATA_OK;
bad:
    util_error("STRATA_IB_GID_INDEX=%s: expected auto, an index below %d, or "
               "device:index pairs such as mlx5_0:3,mlx5_1:5",
               spec, TP_VERBS_GID_MAX);
    return STRATA_ERR_CONFIG;
}

/* Reads a small sysfs file into buf without its newline. Returns -errno. */
static int tp_verbs_read_attr(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, len - 1);
    int err = n < 0 ? -errno : 0;
    close(fd);
    if (err)
        return err;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        n--;
    buf[n] = '\0';
    return 0;
}

static bool tp_verbs_gid_is_zero(const uint8_t raw[16])
{
    for (int i = 0; i < 16; i++)
        if (raw[i])
            return false;
    return true;
}

/* Fills gid from entry index of the port; false when the entry is empty,
 * unreadable, or (for Ethernet) its type cannot be read. */
static bool tp_verbs_gid_read(const char *port_dir, int index, bool ethernet,
                              tp_verbs_gid_t *gid)
{
    char path[512], text[64];
    snprintf(path, sizeof(path), "%s/gids/%d", port_dir, index);
    if (tp_verbs_read_attr(path, text, sizeof(text)) != 0 ||
        inet_pton(AF_INET6, text, gid->raw) != 1 ||
        tp_verbs_gid_is_zero(gid->raw))
        return false;
    gid->index = index;
    static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0,    0,
                                          0, 0, 0, 0, 0xff, 0xff};
    gid->ipv4 = memcmp(gid->raw, v4_prefix, sizeof(v4_prefix)) == 0;
    gid->link_local = gid->raw[0] == 0xfe && (gid->raw[1] & 0xc0) == 0x80;
    if (!ethernet) {
        gid->type = TP_VERBS_GID_IB;
        return true;
    }
    /* EINVAL here: the entry belongs to another network namespace. */
    snprintf(path, sizeof(path), "%s/gid_attrs/types/%d", port_dir, index);
    if (tp_verbs_read_attr(path, text, sizeof(text)) != 0)
        return false;
    if (strcmp(text, "RoCE v2") == 0)
        gid->type = TP_VERBS_GID_ROCE_V2;
    else if (strstr(text, "v1"))
        gid->type = TP_VERBS_GID_ROCE_V1;
    else
        return false;
    return true;
}

/* Lower is better: link-local last, RoCE v1 after v2, IPv6 after IPv4. */
static int tp_verbs_gid_rank(const tp_verbs_gid_t *gid)
{
    return (gid->link_local ? 4 : 0) +
           (gid->type == TP_VERBS_GID_ROCE_V2 ? 0 : 2) + (gid->ipv4 ? 0 : 1);
}

static int tp_verbs_gid_count(const char *port_dir)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/gids", port_dir);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int max = -1;
    for (struct dirent *e; (e = readdir(d));) {
        char *end;
        long v = strtol(e->d_name, &end, 10);
        if (end != e->d_name && *end == '\0' && v > max && v < TP_VERBS_GID_MAX)
            max = (int)v;
    }
    closedir(d);
    return max + 1;
}

strata_status_t tp_verbs_gid_select(const char *sysfs_root, const char *dev,
                                    int port, bool ethernet, int override,
                                    tp_verbs_gid_t *gid_out)
{
    char port_dir[384];
    snprintf(port_dir, sizeof(port_dir), "%s/%s/ports/%d", sysfs_root, dev,
             port);
    tp_verbs_gid_t gid;
    if (override >= 0) {
        if (tp_verbs_gid_read(port_dir, override, ethernet, &gid)) {
            *gid_out = gid;
            return STRATA_OK;
        }
        util_error("STRATA_IB_GID_INDEX: GID %d of %s port %d is empty or "
                   "unusable here (see %s/gids and gid_attrs/types)",
                   override, dev, port, port_dir);
        return STRATA_ERR_NO_DEVICE;
    }
    if (!ethernet && tp_verbs_gid_read(port_dir, 0, false, &gid)) {
        *gid_out = gid;
        return STRATA_OK;
    }
    int n = tp_verbs_gid_count(port_dir), best_rank = 1 << 20;
    for (int i = 0; ethernet && i < n; i++) {
        if (!tp_verbs_gid_read(port_dir, i, true, &gid))
            continue;
        int rank = tp_verbs_gid_rank(&gid);
        if (rank < best_rank) {
            best_rank = rank;
            *gid_out = gid;
        }
    }
    if (best_rank < (1 << 20))
        return STRATA_OK;
    util_error("%s port %d has no usable GID (%d entries in %s/gids, none "
               "with a readable RoCE type); does its network interface have "
               "an IP address in this namespace?",
               dev, port, n, port_dir);
    return STRATA_ERR_NO_DEVICE;
}

void tp_verbs_gid_str(const tp_verbs_gid_t *gid, char *buf, size_t len)
{
    if (!inet_ntop(AF_INET6, gid->raw, buf, (socklen_t)len))
        snprintf(buf, len, "?");
}
