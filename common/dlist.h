/*
 * An intrusive list whose members can leave it in O(1) from anywhere (the member's `prev` points at the
 * pointer that points at it: the head or the previous member's `next`). An unlinked member has prev NULL,
 * so unlinking twice, or a member never linked, is a no-op. Not thread-safe; the owner's thread only.
 *
 *   typedef struct item { ...; pdr_dlink_t link; } item_t;
 *   pdr_dlink_t *head = NULL;
 *   pdr_dlink_push(&head, &it->link);
 *   item_t *first = PDR_DLINK_ITEM(head, item_t, link);
 */
#ifndef PDR_DLIST_H
#define PDR_DLIST_H

#include <stddef.h>

typedef struct pdr_dlink {
    struct pdr_dlink *next, **prev;
} pdr_dlink_t;

#define PDR_DLINK_ITEM(l, type, member) ((type *)(void *)((char *)(l)-offsetof(type, member)))

static inline int pdr_dlink_linked(const pdr_dlink_t *l)
{
    return l->prev != NULL;
}

/* Links l at the front of the list (l must not be linked). */
static inline void pdr_dlink_push(pdr_dlink_t **head, pdr_dlink_t *l)
{
    l->next = *head;
    if (*head != NULL)
        (*head)->prev = &l->next;
    *head = l;
    l->prev = head;
}

static inline void pdr_dlink_unlink(pdr_dlink_t *l)
{
    if (l->prev == NULL)
        return;
    *l->prev = l->next;
    if (l->next != NULL)
        l->next->prev = l->prev;
    l->prev = NULL;
    l->next = NULL;
}

/*
 * A FIFO of the same links: members join at the tail and leave from anywhere (pdr_dqueue_unlink, which
 * keeps the tail right; pdr_dlink_unlink alone would not). head is a plain list for iteration.
 */
typedef struct pdr_dqueue {
    pdr_dlink_t *head, *tail;
} pdr_dqueue_t;

static inline void pdr_dqueue_append(pdr_dqueue_t *q, pdr_dlink_t *l)
{
    l->next = NULL;
    l->prev = q->tail != NULL ? &q->tail->next : &q->head;
    *l->prev = l;
    q->tail = l;
}

static inline void pdr_dqueue_unlink(pdr_dqueue_t *q, pdr_dlink_t *l)
{
    if (l->prev == NULL)
        return;
    if (q->tail == l) /* the previous member's `next` is its link's first field */
        q->tail = l->prev == &q->head ? NULL : PDR_DLINK_ITEM(l->prev, pdr_dlink_t, next);
    pdr_dlink_unlink(l);
}

#endif
