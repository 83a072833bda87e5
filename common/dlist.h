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

/* The item that holds link l, or NULL for a NULL link (an empty list, the end of a list); l is evaluated
 * once, so it may be a call: PDR_DLINK_ENTRY(pdr_dlink_pop(&head), item_t, link). */
static inline void *pdr_dlink_entry(pdr_dlink_t *l, size_t offset)
{
    return l != NULL ? (void *)((char *)l - offset) : NULL;
}
#define PDR_DLINK_ENTRY(l, type, member) ((type *)pdr_dlink_entry((l), offsetof(type, member)))

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

/* Unlinks and returns the first member, or NULL when the list is empty. With push, a stack. */
static inline pdr_dlink_t *pdr_dlink_pop(pdr_dlink_t **head)
{
    pdr_dlink_t *l = *head;
    if (l != NULL)
        pdr_dlink_unlink(l);
    return l;
}

/* Moves every member of *from, in order, to *to (which must be empty); *from ends empty. Takes a whole
 * list handed between threads in one step under the lock that guards *from. */
static inline void pdr_dlink_move(pdr_dlink_t **to, pdr_dlink_t **from)
{
    *to = *from;
    *from = NULL;
    if (*to != NULL)
        (*to)->prev = to;
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

/* Unlinks and returns the oldest member, or NULL when the queue is empty. */
static inline pdr_dlink_t *pdr_dqueue_pop(pdr_dqueue_t *q)
{
    pdr_dlink_t *l = q->head;
    if (l != NULL)
        pdr_dqueue_unlink(q, l);
    return l;
}

/* Moves every member of from, in order, to to (which must be empty); from ends empty. */
static inline void pdr_dqueue_move(pdr_dqueue_t *to, pdr_dqueue_t *from)
{
    *to = *from;
    from->head = from->tail = NULL;
    if (to->head != NULL)
        to->head->prev = &to->head;
}

#endif
