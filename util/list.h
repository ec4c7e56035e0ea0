/* Intrusive circular doubly-linked lists for the providers' bookkeeping. */
#ifndef STRATA_UTIL_LIST_H
#define STRATA_UTIL_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct util_list {
    struct util_list *prev, *next;
} util_list_t;

#define util_container_of(ptr, type, member)                                   \
    ((type *)((char *)(ptr)-offsetof(type, member)))

/* A head, or a node that is on no list, points to itself. */
static inline void util_list_init(util_list_t *l)
{
    l->prev = l->next = l;
}

static inline bool util_list_empty(const util_list_t *l)
{
    return l->next == l;
}

static inline void util_list_add_tail(util_list_t *head, util_list_t *node)
{
    node->prev = head->prev;
    node->next = head;
    head->prev->next = node;
    head->prev = node;
}

static inline void util_list_del(util_list_t *node)
{
    node->prev->next = node->next;
    node->next->prev = node->prev;
    util_list_init(node);
}

/* Adds node unless it is on a list already. */
static inline void util_list_ensure(util_list_t *head, util_list_t *node)
{
    if (util_list_empty(node))
        util_list_add_tail(head, node);
}

/* Iterate where the body may delete the current node. */
#define util_list_for_each_safe(pos, tmp, head)                                \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);           \
         (pos) = (tmp), (tmp) = (pos)->next)

#endif /* STRATA_UTIL_LIST_H */
