/*
 * The admission queue's scheduler (fairq.c; docs/internals/admission.md, "Priority and fairness"): queued
 * items in classes, the most important first, and within a class one sub-queue per tenant, served in
 * round robin (deficit round robin with every request costing one). At most max_tenants tenants are
 * tracked per class at a time (a tenant is tracked while it has items queued); the others share one
 * overflow sub-queue, and each item put there is counted. Pure data, no lock: the caller (admission.c)
 * holds its own.
 */
#ifndef PDR_FAIRQ_H
#define PDR_FAIRQ_H

#include <stddef.h>
#include <stdint.h>
#include "dlist.h"

#define PDR_FAIRQ_MAX_CLASSES 8    /* admission.classes names at most this many */
#define PDR_FAIRQ_MAX_TENANTS 1024 /* admission.max_tenants' ceiling */

/* One queued item, embedded in what waits (admission's waiter). */
typedef struct pdr_fairq_item {
    pdr_dlink_t link;
    uint64_t key; /* the tenant's key (a hash) */
    int cls;      /* its class, 0 the most important */
    int tenant;   /* its sub-queue: a slot, or PDR_FAIRQ_MAX_TENANTS for the overflow one */
} pdr_fairq_item_t;

typedef struct pdr_fairq_tenant {
    pdr_dqueue_t q;
    uint64_t key;
    uint32_t n; /* items queued; 0: the slot is free */
} pdr_fairq_tenant_t;

typedef struct pdr_fairq_class {
    pdr_fairq_tenant_t t[PDR_FAIRQ_MAX_TENANTS + 1]; /* the last one: the overflow sub-queue */
    int next;                                        /* where the round robin goes on (a position) */
    int span;                                        /* tracked slots ever used: positions 0..span */
    uint32_t n;                                      /* items of the class */
} pdr_fairq_class_t;

typedef struct pdr_fairq {
    pdr_fairq_class_t cls[PDR_FAIRQ_MAX_CLASSES];
    uint64_t overflow; /* items queued in an overflow sub-queue, ever */
} pdr_fairq_t;

/* What the pump's callback says of an item offered to it. */
typedef enum {
    PDR_FAIRQ_TAKE = 0, /* it goes: the pump unlinks it */
    PDR_FAIRQ_SKIP,     /* it cannot go now, another may (its pool is full) */
    PDR_FAIRQ_STOP,     /* nothing can go now */
} pdr_fairq_verdict_t;

typedef pdr_fairq_verdict_t (*pdr_fairq_try_cb)(pdr_fairq_item_t *it, void *arg);

/* Queues it (its key and cls filled in; cls is clamped to the classes there are) in its tenant's
 * sub-queue, at most max_tenants tenants tracked in the class. Returns 1 when it went to the overflow
 * sub-queue, else 0. */
int pdr_fairq_push(pdr_fairq_t *q, pdr_fairq_item_t *it, int max_tenants);
/* Takes a queued it out (no-op when it is not queued). */
void pdr_fairq_remove(pdr_fairq_t *q, pdr_fairq_item_t *it);
/* Offers the queued items to try_cb in the order they may go: the classes from the most important, and in
 * a class the tenants in round robin, each tenant's items oldest first (a skipped item lets the next one of
 * its tenant be offered). An item taken is unlinked before try_cb sees the next. Returns the items taken. */
size_t pdr_fairq_pump(pdr_fairq_t *q, pdr_fairq_try_cb try_cb, void *arg);
/* Items queued in class cls. */
uint32_t pdr_fairq_class_depth(const pdr_fairq_t *q, int cls);
/* The tenant key of a text (FNV-1a, 64 bits; 0 is kept for "no key"). */
uint64_t pdr_fairq_key(const char *s, size_t len);

#endif
