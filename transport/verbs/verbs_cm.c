/*
 * Connections through rdma_cm: listeners, the active and passive sides, the
 * event channel, and the queue-pair state changes. The provider creates its
 * queue pairs itself (rdma_cm only carries the connection exchange), so that
 * it sets the access flags (no remote writes before authentication), the
 * timeouts (from STRATA_TIMEOUT_MS) and the source GID, and brings up the
 * extra queue pairs of an endpoint along the route rdma_cm resolved for the
 * first one.
 */
#include "transport/verbs/verbs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>

#include "util/log.h"

#define TP_VERBS_CM_MAGIC 0x53545256u /* "STRV" */
#define TP_VERBS_CM_VERSION 1
#define TP_VERBS_BACKLOG 128

/* Private data of the connection request and reply. */
typedef struct tp_verbs_cm_priv {
    uint32_t magic;    /* big-endian */
    uint8_t version;   /* TP_VERBS_CM_VERSION */
    uint8_t nqps;      /* request: wanted; reply: agreed */
    uint16_t rx_depth; /* big-endian: receives posted for the peer */
} tp_verbs_cm_priv_t;

/* ---- addresses ---- */

static void tp_verbs_sockaddr_str(const struct sockaddr *sa, char *buf,
                                  size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
        snprintf(buf, len, "%s:%u", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const void *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
        snprintf(buf, len, "[%s]:%u", host, port);
    } else {
        snprintf(buf, len, "(address family %d)", sa->sa_family);
    }
}

/* "host:port" or "[v6]:port" into sa. */
static strata_status_t tp_verbs_parse_addr(const char *what, const char *text,
                                           bool passive,
                                           struct sockaddr_storage *sa)
{
    char host[256];
    const char *colon = strrchr(text, ':');
    size_t hlen = colon ? (size_t)(colon - text) : 0;
    if (!colon || hlen == 0 || hlen >= sizeof(host) || !colon[1])
        goto bad;
    memcpy(host, text, hlen);
    host[hlen] = '\0';
    if (host[0] == '[' && host[hlen - 1] == ']') {
        memmove(host, host + 1, hlen - 2);
        host[hlen - 2] = '\0';
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags =
                                 AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)};
    struct addrinfo *res = NULL;
    int err = getaddrinfo(host, colon + 1, &hints, &res);
    if (err) {
        util_error("verbs: %s %s: %s", what, text, gai_strerror(err));
        return STRATA_ERR_INVALID;
    }
    memset(sa, 0, sizeof(*sa));
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return STRATA_OK;
bad:
    util_error("verbs: %s '%s': expected host:port", what, text);
    return STRATA_ERR_INVALID;
}

/* ---- listeners ---- */

static strata_status_t tp_verbs_listener_addr(tp_verbs_ctx_t *c,
                                              tp_verbs_listener_t *l)
{
    struct sockaddr *sa = rdma_get_local_addr(l->id);
    tp_verbs_sockaddr_str(sa, l->base.addr, sizeof(l->base.addr));
    bool any =
        (sa->sa_family == AF_INET &&
         ((struct sockaddr_in *)sa)->sin_addr.s_addr == INADDR_ANY) ||
        (sa->sa_family == AF_INET6 &&
         IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)sa)->sin6_addr));
    if (any && *c->addr)
        snprintf(l->base.addr, sizeof(l->base.addr), "%s:%u", c->addr,
                 ntohs(rdma_get_src_port(l->id)));
    return STRATA_OK;
}

strata_status_t tp_verbs_listen(tp_ctx_t *ctx, const char *bind,
                                tp_listener_t **listener_out)
{
    tp_verbs_ctx_t *c = tp_verbs_ctx(ctx);
    char text[128];
    if (!bind) {
        if (!*c->addr) {
            util_error("verbs: %s port %u has no IP address to listen on; "
                       "pass host:port to tp_listen",
                       c->dev_name, c->port);
            return STRATA_ERR_NO_DEVICE;
        }
        snprintf(text, sizeof(text), strchr(c->addr, ':') ? "[%s]:0" : "%s:0",
                 c->addr);
        bind = text;
    }
    struct sockaddr_storage sa;
    strata_status_t st = tp_verbs_parse_addr("listen address", bind, true, &sa);
    if (st != STRATA_OK)
        return st;
    tp_verbs_listener_t *l = util_calloc(1, sizeof(*l));
    if (!l) {
        util_error("verbs: out of memory for a listener");
        return STRATA_ERR_NOMEM;
    }
    l->base.ctx = ctx;
    l->cmref = (tp_verbs_cmref_t){true, l};
    if (rdma_create_id(c->cm, &l->id, &l->cmref, RDMA_PS_TCP)) {
        util_error("verbs: rdma_create_id failed: %s", strerror(errno));
        goto free_listener;
    }
    if (rdma_bind_addr(l->id, (struct sockaddr *)&sa)) {
        util_error("verbs: cannot listen on %s: rdma_bind_addr: %s", bind,
                   strerror(errno));
        goto destroy_id;
    }
    if (l->id->verbs && !tp_verbs_same_device(c, l->id->verbs)) {
        util_error("verbs: listen address %s belongs to %s, not to %s which "
                   "this context uses (STRATA_IB_DEVICE)",
                   bind, ibv_get_device_name(l->id->verbs->device),
                   c->dev_name);
        goto destroy_id;
    }
    if (rdma_listen(l->id, TP_VERBS_BACKLOG)) {
        util_error("verbs: rdma_listen on %s failed: %s", bind,
                   strerror(errno));
        goto destroy_id;
    }
    tp_verbs_listener_addr(c, l);
    l->next = c->listeners;
    if (c->listeners)
        c->listeners->prev = l;
    c->listeners = l;
    util_debug("verbs: listening on %s", l->base.addr);
    *listener_out = &l->base;
    return STRATA_OK;

destroy_id:
    rdma_destroy_id(l->id);
free_listener:
    util_free(l);
    return STRATA_ERR_IO;
}

void tp_verbs_listener_close(tp_listener_t *base)
{
    tp_verbs_listener_t *l = (tp_verbs_listener_t *)base;
    tp_verbs_ctx_t *c = tp_verbs_ctx(base->ctx);
    /* Connections still being accepted go with it; accepted ones stay, and
     * their queued ACCEPTED events lose the listener. */
    for (tp_verbs_ep_t *ep = c->eps; ep; ep = ep->next) {
        if (ep->listener != l)
            continue;
        ep->listener = NULL;
        if (!ep->visible && ep->state < TP_VERBS_EP_FAILED)
            tp_verbs_ep_fail(ep, STRATA_ERR_CANCELED);
    }
    for (uint32_t i = c->evq_head; i != c->evq_tail; i++)
        if (c->evq[i & (c->evq_cap - 1)].listener == base)
            c->evq[i & (c->evq_cap - 1)].listener = NULL;
    rdma_destroy_id(l->id);
    if (l->prev)
        l->prev->next = l->next;
    else
        c->listeners = l->next;
    if (l->next)
        l->next->prev = l->prev;
    util_free(l);
}

/* ---- queue pair states ---- */

static strata_status_t tp_verbs_qp_modify(tp_verbs_ep_t *ep, tp_verbs_qp_t *qp,
                                          struct ibv_qp_attr *attr, int mask)
{
    int err = ibv_modify_qp(qp->qp, attr, mask);
    if (!err)
        return STRATA_OK;
    util_error("verbs: moving QP %u of the endpoint to %s to %s failed: %s",
               qp->qp->qp_num, ep->base.peer,
               attr->qp_state == IBV_QPS_INIT  ? "INIT"
               : attr->qp_state == IBV_QPS_RTR ? "RTR"
               : attr->qp_state == IBV_QPS_RTS ? "RTS"
                                               : "another state",
               strerror(err));
    return STRATA_ERR_IO;
}

static strata_status_t tp_verbs_cm_attr(tp_verbs_ep_t *ep,
                                        enum ibv_qp_state state,
                                        struct ibv_qp_attr *attr, int *mask)
{
    memset(attr, 0, sizeof(*attr));
    attr->qp_state = state;
    if (rdma_init_qp_attr(ep->id, attr, mask) == 0)
        return STRATA_OK;
    util_error("verbs: rdma_init_qp_attr for the endpoint to %s failed: %s",
               ep->base.peer, strerror(errno));
    return STRATA_ERR_IO;
}

/* QP 0 to INIT with no remote access, and its receives posted. */
static strata_status_t tp_verbs_qp0_init(tp_verbs_ep_t *ep)
{
    strata_status_t st =
        tp_verbs_cm_attr(ep, IBV_QPS_INIT, &ep->init, &ep->init_mask);
    if (st != STRATA_OK)
        return st;
    ep->init.qp_access_flags = 0; /* tp_verbs_qps_allow_write() */
    ep->init_mask |= IBV_QP_ACCESS_FLAGS;
    st = tp_verbs_qp_modify(ep, &ep->qps[0], &ep->init, ep->init_mask);
    if (st != STRATA_OK)
        return st;
    tp_verbs_rq_refill(ep, true);
    return ep->nrfree ? STRATA_ERR_IO : STRATA_OK;
}

/* QP 0 to RTR and RTS along rdma_cm's route, with our timeouts. */
static strata_status_t tp_verbs_qp0_up(tp_verbs_ep_t *ep)
{
    tp_verbs_params_t *p = &ep->ctx->p;
    strata_status_t st =
        tp_verbs_cm_attr(ep, IBV_QPS_RTR, &ep->rtr, &ep->rtr_mask);
    if (st != STRATA_OK)
        return st;
    ep->rtr.min_rnr_timer = p->min_rnr_timer;
    if (p->gid_override >= 0 && (ep->rtr_mask & IBV_QP_AV) &&
        ep->rtr.ah_attr.is_global)
        ep->rtr.ah_attr.grh.sgid_index = (uint8_t)ep->ctx->gid.index;
    st = tp_verbs_qp_modify(ep, &ep->qps[0], &ep->rtr, ep->rtr_mask);
    if (st != STRATA_OK)
        return st;
    st = tp_verbs_cm_attr(ep, IBV_QPS_RTS, &ep->rts, &ep->rts_mask);
    if (st != STRATA_OK)
        return st;
    ep->rts.timeout = p->qp_timeout;
    ep->rts.retry_cnt = p->retry_cnt;
    ep->rts.rnr_retry = p->rnr_retry;
    ep->rts_mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
    return tp_verbs_qp_modify(ep, &ep->qps[0], &ep->rts, ep->rts_mask);
}

strata_status_t tp_verbs_qps_extra_up(tp_verbs_ep_t *ep, const uint32_t *qpn,
                                      const uint32_t *psn)
{
    for (unsigned i = 1; i < ep->nqps; i++) {
        tp_verbs_qp_t *qp = &ep->qps[i];
        struct ibv_qp_attr a = ep->init;
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
        strata_status_t st = tp_verbs_qp_modify(ep, qp, &a, ep->init_mask);
        if (st != STRATA_OK)
            return st;
        a = ep->rtr;
        a.dest_qp_num = qpn[i - 1];
        a.rq_psn = psn[i - 1];
        st = tp_verbs_qp_modify(ep, qp, &a, ep->rtr_mask);
        if (st != STRATA_OK)
            return st;
        a = ep->rts;
        a.sq_psn = qp->psn;
        st = tp_verbs_qp_modify(ep, qp, &a, ep->rts_mask);
        if (st != STRATA_OK)
            return st;
    }
    return STRATA_OK;
}

strata_status_t tp_verbs_qps_allow_write(tp_verbs_ep_t *ep)
{
    struct ibv_qp_attr a = {.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
    int err = ibv_modify_qp(ep->qps[0].qp, &a, IBV_QP_ACCESS_FLAGS);
    if (!err)
        return STRATA_OK;
    util_error("verbs: enabling remote writes on the QP to %s failed: %s",
               ep->base.peer, strerror(err));
    return STRATA_ERR_IO;
}

/* ---- the active side ---- */

static void tp_verbs_priv_fill(tp_verbs_ep_t *ep, tp_verbs_cm_priv_t *priv)
{
    priv->magic = htonl(TP_VERBS_CM_MAGIC);
    priv->version = TP_VERBS_CM_VERSION;
    priv->nqps = (uint8_t)ep->nqps;
    priv->rx_depth = htons((uint16_t)ep->rx_depth);
}

static bool tp_verbs_priv_ok(const void *data, uint8_t len,
                             tp_verbs_cm_priv_t *priv)
{
    if (!data || len < sizeof(*priv))
        return false;
    memcpy(priv, data, sizeof(*priv));
    priv->rx_depth = ntohs(priv->rx_depth);
    return ntohl(priv->magic) == TP_VERBS_CM_MAGIC &&
           priv->version == TP_VERBS_CM_VERSION && priv->nqps >= 1 &&
           priv->nqps <= TP_VERBS_QPS_MAX && priv->rx_depth >= 2;
}

static struct rdma_conn_param tp_verbs_conn_param(tp_verbs_ep_t *ep,
                                                  tp_verbs_cm_priv_t *priv)
{
    tp_verbs_priv_fill(ep, priv);
    return (struct rdma_conn_param){
        .private_data = priv,
        .private_data_len = sizeof(*priv),
        .responder_resources = 0, /* no RDMA reads */
        .initiator_depth = 0,
        .flow_control = 1,
        .retry_count = ep->ctx->p.retry_cnt,
        .rnr_retry_count = ep->ctx->p.rnr_retry,
        .qp_num = ep->qps[0].qp->qp_num,
    };
}

strata_status_t tp_verbs_connect(tp_ctx_t *ctx, const char *addr,
                                 tp_ep_t **ep_out)
{
    tp_verbs_ctx_t *c = tp_verbs_ctx(ctx);
    struct sockaddr_storage dst, src;
    strata_status_t st = tp_verbs_parse_addr("peer address", addr, false, &dst);
    if (st != STRATA_OK)
        return st;
    bool have_src = false;
    if (*c->addr) {
        char text[96];
        snprintf(text, sizeof(text), strchr(c->addr, ':') ? "[%s]:0" : "%s:0",
                 c->addr);
        have_src = tp_verbs_parse_addr("source address", text, true, &src) ==
                       STRATA_OK &&
                   src.ss_family == dst.ss_family;
    }
    tp_verbs_ep_t *ep;
    st = tp_verbs_ep_create(c, NULL, true, c->p.nqps, &ep);
    if (st != STRATA_OK)
        return st;
    snprintf(ep->base.peer, sizeof(ep->base.peer), "%s", addr);
    if (rdma_create_id(c->cm, &ep->id, &ep->cmref, RDMA_PS_TCP)) {
        util_error("verbs: rdma_create_id failed: %s", strerror(errno));
        goto destroy;
    }
    if (rdma_resolve_addr(ep->id, have_src ? (struct sockaddr *)&src : NULL,
                          (struct sockaddr *)&dst, ctx->timeout_ms)) {
        util_error("verbs: resolving %s failed: %s", addr, strerror(errno));
        goto destroy;
    }
    ep->visible = true;
    *ep_out = &ep->base;
    return STRATA_OK;

destroy:
    tp_verbs_ep_destroy(ep);
    return STRATA_ERR_IO;
}

static strata_status_t tp_verbs_on_addr(tp_verbs_ep_t *ep)
{
    tp_verbs_ctx_t *c = ep->ctx;
    if (!tp_verbs_same_device(c, ep->id->verbs) ||
        ep->id->port_num != c->port) {
        util_error("verbs: %s is reached through %s port %u, not through %s "
                   "port %u which this context uses (STRATA_IB_DEVICE)",
                   ep->base.peer,
                   ep->id->verbs ? ibv_get_device_name(ep->id->verbs->device)
                                 : "no RDMA device",
                   ep->id->port_num, c->dev_name, c->port);
        return STRATA_ERR_NO_DEVICE;
    }
    if (rdma_resolve_route(ep->id, c->base.timeout_ms)) {
        util_error("verbs: resolving the route to %s failed: %s", ep->base.peer,
                   strerror(errno));
        return STRATA_ERR_IO;
    }
    ep->state = TP_VERBS_EP_RESOLVE_ROUTE;
    return STRATA_OK;
}

static strata_status_t tp_verbs_on_route(tp_verbs_ep_t *ep)
{
    strata_status_t st = tp_verbs_qp0_init(ep);
    if (st != STRATA_OK)
        return st;
    tp_verbs_cm_priv_t priv;
    struct rdma_conn_param param = tp_verbs_conn_param(ep, &priv);
    if (rdma_connect(ep->id, &param)) {
        util_error("verbs: rdma_connect to %s failed: %s", ep->base.peer,
                   strerror(errno));
        return STRATA_ERR_IO;
    }
    ep->state = TP_VERBS_EP_CONNECTING;
    return STRATA_OK;
}

static strata_status_t tp_verbs_on_response(tp_verbs_ep_t *ep,
                                            const struct rdma_cm_event *ev)
{
    tp_verbs_cm_priv_t priv;
    if (!tp_verbs_priv_ok(ev->param.conn.private_data,
                          ev->param.conn.private_data_len, &priv) ||
        priv.nqps > ep->nqps) {
        util_error("verbs: %s answered with a malformed connection reply "
                   "(not a Strata verbs peer of this version?)",
                   ep->base.peer);
        return STRATA_ERR_PROTO;
    }
    ep->nqps = priv.nqps; /* the server may agree to fewer */
    ep->peer_rx_depth = priv.rx_depth;
    *ep->inbox = priv.rx_depth;
    strata_status_t st = tp_verbs_qp0_up(ep);
    if (st != STRATA_OK)
        return st;
    if (rdma_establish(ep->id)) {
        util_error("verbs: rdma_establish with %s failed: %s", ep->base.peer,
                   strerror(errno));
        return STRATA_ERR_IO;
    }
    tp_verbs_hs_start(ep);
    return STRATA_OK;
}

/* ---- the passive side ---- */

static strata_status_t tp_verbs_accept(tp_verbs_listener_t *l,
                                       struct rdma_cm_id *id,
                                       const tp_verbs_cm_priv_t *req,
                                       tp_verbs_ep_t **ep_out)
{
    tp_verbs_ctx_t *c = tp_verbs_ctx(l->base.ctx);
    unsigned nqps = req->nqps < c->p.nqps ? req->nqps : c->p.nqps;
    tp_verbs_ep_t *ep;
    strata_status_t st = tp_verbs_ep_create(c, id, false, nqps, &ep);
    if (st != STRATA_OK)
        return st;
    *ep_out = ep;
    ep->listener = l;
    ep->peer_rx_depth = req->rx_depth;
    *ep->inbox = req->rx_depth;
    st = tp_verbs_qp0_init(ep);
    if (st == STRATA_OK)
        st = tp_verbs_qp0_up(ep);
    if (st != STRATA_OK)
        return st;
    tp_verbs_cm_priv_t priv;
    struct rdma_conn_param param = tp_verbs_conn_param(ep, &priv);
    if (rdma_accept(id, &param)) {
        util_error("verbs: rdma_accept of %s failed: %s", ep->base.peer,
                   strerror(errno));
        return STRATA_ERR_IO;
    }
    ep->state = TP_VERBS_EP_ACCEPTING;
    tp_verbs_hs_start(ep);
    return STRATA_OK;
}

/* A connection request; returns an id to destroy once the event is acked. */
static struct rdma_cm_id *tp_verbs_on_request(tp_verbs_ctx_t *c,
                                              tp_verbs_listener_t *l,
                                              struct rdma_cm_event *ev)
{
    char peer[128];
    tp_verbs_sockaddr_str(rdma_get_peer_addr(ev->id), peer, sizeof(peer));
    tp_verbs_cm_priv_t req;
    if (!tp_verbs_priv_ok(ev->param.conn.private_data,
                          ev->param.conn.private_data_len, &req)) {
        util_error("verbs: connection request from %s on %s is not from a "
                   "Strata verbs peer of this version; rejected",
                   peer, l->base.addr);
        rdma_reject(ev->id, NULL, 0);
        return ev->id;
    }
    if (!tp_verbs_same_device(c, ev->id->verbs) ||
        ev->id->port_num != c->port) {
        util_error("verbs: connection request from %s arrived on %s port %u, "
                   "not on %s port %u; rejected",
                   peer, ibv_get_device_name(ev->id->verbs->device),
                   ev->id->port_num, c->dev_name, c->port);
        rdma_reject(ev->id, NULL, 0);
        return ev->id;
    }
    tp_verbs_ep_t *ep = NULL;
    strata_status_t st = tp_verbs_accept(l, ev->id, &req, &ep);
    if (ep)
        snprintf(ep->base.peer, sizeof(ep->base.peer), "%s", peer);
    if (st == STRATA_OK)
        return NULL;
    rdma_reject(ev->id, NULL, 0);
    if (!ep)
        return ev->id;
    ep->id = NULL; /* destroyed after the ack, not with the endpoint */
    tp_verbs_ep_destroy(ep);
    return ev->id;
}

/* ---- the event channel ---- */

static const char *tp_verbs_reject_reason(const struct rdma_cm_event *ev)
{
    return ev->status == 28 /* IB_CM_REJ_CONSUMER_DEFINED */
               ? "the peer rejected it"
               : "no Strata listener at that address, or it refused";
}

static void tp_verbs_on_ep_event(tp_verbs_ep_t *ep, struct rdma_cm_event *ev)
{
    strata_status_t st = STRATA_OK;
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        st = tp_verbs_on_addr(ep);
        break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        st = tp_verbs_on_route(ep);
        break;
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
        st = tp_verbs_on_response(ep, ev);
        break;
    case RDMA_CM_EVENT_ESTABLISHED:
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
        return;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
        /* the caller of tp_connect reports it */
        snprintf(ep->base.why, sizeof(ep->base.why), "connect failed: %s (%s)",
                 rdma_event_str(ev->event), strerror(-ev->status));
        util_debug("verbs: %s: %s", ep->base.peer, ep->base.why);
        st = STRATA_ERR_PEER;
        break;
    case RDMA_CM_EVENT_REJECTED:
        snprintf(ep->base.why, sizeof(ep->base.why), "connection rejected: %s",
                 tp_verbs_reject_reason(ev));
        util_debug("verbs: %s: %s", ep->base.peer, ep->base.why);
        st = STRATA_ERR_PEER;
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
        if (ep->state < TP_VERBS_EP_FAILED)
            util_debug("verbs: %s disconnected", ep->base.peer);
        st = STRATA_ERR_PEER;
        break;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        util_error("verbs: %s was removed; endpoint to %s fails",
                   ep->ctx->dev_name, ep->base.peer);
        st = STRATA_ERR_NO_DEVICE;
        break;
    default:
        util_debug("verbs: %s on the endpoint to %s", rdma_event_str(ev->event),
                   ep->base.peer);
        return;
    }
    if (st != STRATA_OK)
        tp_verbs_ep_fail(ep, st);
}

void tp_verbs_cm_drain(tp_verbs_ctx_t *c)
{
    struct rdma_cm_event *ev;
    while (rdma_get_cm_event(c->cm, &ev) == 0) {
        tp_verbs_cmref_t *ref = ev->id->context;
        struct rdma_cm_id *destroy = NULL;
        if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
            destroy = tp_verbs_on_request(
                c, ((tp_verbs_cmref_t *)ev->listen_id->context)->obj, ev);
        else if (ref && !ref->is_listener)
            tp_verbs_on_ep_event(ref->obj, ev);
        else if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL)
            util_error("verbs: %s was removed; the listener on %s is dead",
                       c->dev_name,
                       ((tp_verbs_listener_t *)ref->obj)->base.addr);
        rdma_ack_cm_event(ev);
        if (destroy)
            rdma_destroy_id(destroy);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK)
        util_error("verbs: rdma_get_cm_event failed: %s", strerror(errno));
    tp_verbs_cm_rearm(c);
}
