/* "host:port" addresses and the socket options of tcp endpoints. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/tcp/tcp.h"
#include "util/log.h"

/* Splits "host:port" or "[v6]:port" into its parts. */
static bool tp_tcp_split(const char *addr, char *host, size_t host_len,
                         const char **port_out)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || colon[1] == '\0')
        return false;
    const char *h = addr;
    size_t n = (size_t)(colon - addr);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n >= host_len)
        return false;
    memcpy(host, h, n);
    host[n] = '\0';
    *port_out = colon + 1;
    return true;
}

/* host:port to a socket address; logged unless quiet. */
static strata_status_t tp_tcp_lookup(const char *addr, bool passive,
                                     struct sockaddr_storage *ss_out,
                                     socklen_t *len_out, bool quiet)
{
    char host[256];
    const char *port;
    if (!tp_tcp_split(addr, host, sizeof(host), &port)) {
        if (!quiet)
            util_error("tcp: address '%s' is not host:port", addr);
        return STRATA_ERR_INVALID;
    }
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC,
        .ai_socktype = SOCK_STREAM,
        .ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0),
    };
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(*host ? host : NULL, port, &hints, &res);
    if (rc != 0) {
        if (!quiet)
            util_error("tcp: cannot resolve '%s': %s", addr, gai_strerror(rc));
        return STRATA_ERR_INVALID;
    }
    memcpy(ss_out, res->ai_addr, res->ai_addrlen);
    *len_out = res->ai_addrlen;
    freeaddrinfo(res);
    return STRATA_OK;
}

strata_status_t tp_tcp_resolve(const char *addr, bool passive,
                               struct sockaddr_storage *ss_out,
                               socklen_t *len_out)
{
    return tp_tcp_lookup(addr, passive, ss_out, len_out, false);
}

void tp_tcp_format(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
        snprintf(buf, len, "%s:%u", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
        snprintf(buf, len, "[%s]:%u", host, port);
    } else {
        snprintf(buf, len, "(family %d)", sa->sa_family);
    }
}

/* Whether interface i is item of STRATA_IFNAME: a CIDR ("10.1.0.0/16"), a
 * name ("=eth0"), or a name prefix ("eth" for eth0, eth1). */
static bool tp_tcp_if_item(const char *item, size_t len,
                           const struct ifaddrs *i)
{
    char buf[128];
    if (len == 0 || len >= sizeof(buf))
        return false;
    memcpy(buf, item, len);
    buf[len] = '\0';
    if (buf[0] == '=')
        return strcmp(i->ifa_name, buf + 1) == 0;
    char *slash = strchr(buf, '/');
    if (!slash)
        return strncmp(i->ifa_name, buf, len) == 0;
    *slash = '\0';
    int bits = atoi(slash + 1);
    unsigned char net[16], mine[16];
    int family = strchr(buf, ':') ? AF_INET6 : AF_INET;
    if (family != i->ifa_addr->sa_family || inet_pton(family, buf, net) != 1 ||
        bits < 0 || bits > (family == AF_INET ? 32 : 128))
        return false;
    if (family == AF_INET)
        memcpy(mine, &((const struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
    else
        memcpy(mine, &((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
               16);
    for (int b = 0; b < bits; b++)
        if (((net[b / 8] ^ mine[b / 8]) >> (7 - b % 8)) & 1)
            return false;
    return true;
}

/* Whether STRATA_IFNAME (spec; "": any) lets interface i be advertised. */
static bool tp_tcp_if_allowed(const char *spec, const struct ifaddrs *i)
{
    if (!*spec)
        return !(i->ifa_flags & IFF_LOOPBACK);
    bool exclude = spec[0] == '^', hit = false;
    for (const char *p = spec + exclude; *p && !hit;) {
        size_t n = strcspn(p, ",");
        hit = tp_tcp_if_item(p, n, i);
        p += n + (p[n] == ',');
    }
    return exclude ? !hit && !(i->ifa_flags & IFF_LOOPBACK) : hit;
}

static socklen_t tp_tcp_sa_len(int family)
{
    return family == AF_INET ? sizeof(struct sockaddr_in)
                             : sizeof(struct sockaddr_in6);
}

static bool tp_tcp_same_host(const struct sockaddr *a,
                             const struct sockaddr_storage *b)
{
    if (a->sa_family != b->ss_family)
        return false;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
}

/* The local address the kernel would send from towards host:port (no
 * packet leaves: a UDP socket is connected, not used). */
static bool tp_tcp_route_src(const char *to, int family,
                             struct sockaddr_storage *ss)
{
    struct sockaddr_storage dst;
    socklen_t dl, sl = sizeof(*ss);
    if (!*to || tp_tcp_lookup(to, false, &dst, &dl, true) != STRATA_OK ||
        dst.ss_family != family)
        return false;
    int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&dst, dl) == 0 &&
              getsockname(fd, (struct sockaddr *)ss, &sl) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* The address a wildcard listener advertises: of an interface that is up,
 * has a carrier (IFF_RUNNING) and STRATA_IFNAME allows; among those, the
 * one the route to the coordinator leaves by, else the first. A management
 * port listed first, or one without a carrier, would otherwise carry (or
 * swallow) the job's traffic. */
static strata_status_t tp_tcp_host_addr(const tp_tcp_ctx_t *ctx, int family,
                                        struct sockaddr_storage *ss)
{
    struct ifaddrs *ifs = NULL, *i, *first = NULL, *routed = NULL;
    if (getifaddrs(&ifs) != 0) {
        util_error("tcp: cannot list the interfaces: %s", strerror(errno));
        return STRATA_ERR_IO;
    }
    struct sockaddr_storage src;
    bool have_src =
        !ctx->ifname[0] && tp_tcp_route_src(ctx->route_to, family, &src);
    char seen[512] = "";
    size_t len = 0;
    for (i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != family)
            continue;
        char a[INET6_ADDRSTRLEN + 16];
        tp_tcp_format(i->ifa_addr, a, sizeof(a));
        bool up = (i->ifa_flags & IFF_UP) && (i->ifa_flags & IFF_RUNNING);
        if (len < sizeof(seen))
            len += (size_t)snprintf(seen + len, sizeof(seen) - len,
                                    "%s%s %.*s%s", len ? ", " : "", i->ifa_name,
                                    (int)(strrchr(a, ':') - a), a,
                                    up ? "" : " (down or no carrier)");
        if (!up || !tp_tcp_if_allowed(ctx->ifname, i))
            continue;
        if (!first)
            first = i;
        if (have_src && !routed && tp_tcp_same_host(i->ifa_addr, &src))
            routed = i;
    }
    i = routed ? routed : first;
    if (i)
        memcpy(ss, i->ifa_addr, tp_tcp_sa_len(family));
    freeifaddrs(ifs);
    if (i || !ctx->ifname[0])
        return i ? STRATA_OK : STRATA_ERR_NO_DEVICE;
    util_error("tcp: STRATA_IFNAME=%s matches no interface that is up with a "
               "carrier here (%s)",
               ctx->ifname, len ? seen : "none");
    return STRATA_ERR_CONFIG;
}

static bool tp_tcp_is_wildcard(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ((const struct sockaddr_in *)ss)->sin_addr.s_addr ==
               htonl(INADDR_ANY);
    return ss->ss_family == AF_INET6 &&
           IN6_IS_ADDR_UNSPECIFIED(
               &((const struct sockaddr_in6 *)ss)->sin6_addr);
}

strata_status_t tp_tcp_listen_addr(const tp_tcp_ctx_t *ctx, int fd, char *buf,
                                   size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        util_error("tcp: getsockname of a listener: %s", strerror(errno));
        return STRATA_ERR_IO;
    }
    if (tp_tcp_is_wildcard(&ss)) {
        struct sockaddr_storage host;
        in_port_t port = ((struct sockaddr_in *)&ss)->sin_port;
        _Static_assert(offsetof(struct sockaddr_in, sin_port) ==
                           offsetof(struct sockaddr_in6, sin6_port),
                       "port at the same offset in both families");
        strata_status_t st = tp_tcp_host_addr(ctx, ss.ss_family, &host);
        if (st == STRATA_OK) {
            ((struct sockaddr_in *)&host)->sin_port = port;
            ss = host;
        } else if (st != STRATA_ERR_NO_DEVICE) {
            return st;
        } else if (ss.ss_family == AF_INET) {
            ((struct sockaddr_in *)&ss)->sin_addr.s_addr =
                htonl(INADDR_LOOPBACK);
        } else {
            ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_loopback;
        }
    }
    tp_tcp_format((struct sockaddr *)&ss, buf, len);
    return STRATA_OK;
}

static void tp_tcp_setopt(int fd, int level, int name, int value,
                          const char *what, const char *peer)
{
    if (setsockopt(fd, level, name, &value, sizeof(value)) != 0)
        util_warn("tcp: peer %s: cannot set %s=%d: %s", peer, what, value,
                  strerror(errno));
}

/* No Nagle delay for small frames. A peer that stops acknowledging (dead
 * host, pulled cable, frozen process) fails the connection after timeout_ms
 * of unacknowledged data (TCP_USER_TIMEOUT) or of keepalive silence when
 * idle. The socket buffers are left to the kernel's autotuning: setting
 * SO_SNDBUF/SO_RCVBUF would switch it off and cap them at wmem_max. */
void tp_tcp_sockopts(int fd, int timeout_ms, const char *peer)
{
    int secs = timeout_ms / 1000 > 0 ? timeout_ms / 1000 : 1;
    tp_tcp_setopt(fd, IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY", peer);
    tp_tcp_setopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, timeout_ms,
                  "TCP_USER_TIMEOUT", peer);
    tp_tcp_setopt(fd, SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE", peer);
    tp_tcp_setopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, (secs + 1) / 2, "TCP_KEEPIDLE",
                  peer);
    tp_tcp_setopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, secs / 6 > 0 ? secs / 6 : 1,
                  "TCP_KEEPINTVL", peer);
    tp_tcp_setopt(fd, IPPROTO_TCP, TCP_KEEPCNT, 3, "TCP_KEEPCNT", peer);
}

bool tp_addr_is_local(const char *host)
{
    char addr[300];
    struct sockaddr_storage ss;
    socklen_t sl;
    snprintf(addr, sizeof(addr), "%s:0", host);
    if (tp_tcp_lookup(addr, true, &ss, &sl, true) != STRATA_OK)
        return false;
    if (tp_tcp_is_wildcard(&ss))
        return true;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&ss, sl) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static bool tp_tcp_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >>
                24) == 127;
    if (sa->sa_family != AF_INET6)
        return false;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) ||
           (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

bool tp_addr_is_loopback(const char *host)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    if (!host || !*host || getaddrinfo(host, NULL, &hints, &res) != 0)
        return false;
    bool loopback = true;
    for (const struct addrinfo *ai = res; ai && loopback; ai = ai->ai_next)
        loopback = tp_tcp_is_loopback(ai->ai_addr);
    freeaddrinfo(res);
    return loopback;
}
