/* Intrusive circular doubly-linked lists for the providers' bookkeeping. */
#ifndef STRATA_UTIL_LIST_H
#define STRATA_UTIL_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct tp_list {
    struct tp_list *prev, *next;
} tp_list_t;

#define tp_container_of(ptr, type, member)                                     \
    ((type *)((char *)(ptr)-offsetof(type, member)))

/* A head, or a node that is on no list, points to itself. */
static inline void tp_list_init(tp_list_t *l)
{
    l->prev = l->next = l;
}

static inline bool tp_list_empty(const tp_list_t *l)
{
    return l->next == l;
}

static inline void tp_list_add_tail(tp_list_t *head, tp_list_t *node)
{
    node->prev = head->prev;
    node->next = head;
    head->prev->next = node;
    head->prev = node;
}

static inline void tp_list_del(tp_list_t *node)
{
    node->prev->next = node->next;
    node->next->prev = node->prev;
    tp_list_init(node);
}

/* Adds node unless it is on a list already. */
static inline void tp_list_ensure(tp_list_t *head, tp_list_t *node)
{
    if (tp_list_empty(node))
        tp_list_add_tail(head, node);
}

/* Iterate where the body may delete the current node. */
#define tp_list_for_each_safe(pos, tmp, head)                                  \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);           \
         (pos) = (tmp), (tmp) = (pos)->next)

#endif /* STRATA_UTIL_LIST_H */
