/*
 * The admission queue's scheduler (fairq.h). Classes are served strictly by importance: an item of a less
 * important class is offered only when every item of the more important ones was taken or skipped (its
 * pool is full). Within a class, the tenants with items queued are served in round robin from where the
 * last item was taken, one item per turn, so that tenants that are all backlogged get equal shares of the
 * slots whatever they offer. A tenant's slot is found by a walk of the class's slots (at most max_tenants,
 * under the caller's lock) and freed when its last item leaves.
 *
 * Invariants: an item is linked in exactly the sub-queue named by its cls and tenant, or in none;
 * cls[c].n is the sum of its tenants' n. Thread: the caller's, under the caller's lock.
 */
#include "fairq.h"

#define OVERFLOW PDR_FAIRQ_MAX_TENANTS

uint64_t pdr_fairq_key(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a's offset basis and prime */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h != 0 ? h : 1;
}

static int find_slot(pdr_fairq_class_t *c, uint64_t key, int max_tenants)
{
    if (max_tenants > PDR_FAIRQ_MAX_TENANTS)
        max_tenants = PDR_FAIRQ_MAX_TENANTS;
    int free_slot = -1;
    for (int j = 0; j < max_tenants; j++) {
        if (c->t[j].n == 0) {
            if (free_slot < 0)
                free_slot = j;
        } else if (c->t[j].key == key) {
            return j;
        }
    }
    return free_slot >= 0 ? free_slot : OVERFLOW;
}

int pdr_fairq_push(pdr_fairq_t *q, pdr_fairq_item_t *it, int max_tenants)
{
    if (it->cls < 0)
        it->cls = 0;
    if (it->cls >= PDR_FAIRQ_MAX_CLASSES)
        it->cls = PDR_FAIRQ_MAX_CLASSES - 1;
    pdr_fairq_class_t *c = &q->cls[it->cls];
    int j = find_slot(c, it->key, max_tenants);
    pdr_fairq_tenant_t *t = &c->t[j];
    if (t->n == 0)
        t->key = it->key;
    it->tenant = j;
    if (j != OVERFLOW && j >= c->span)
        c->span = j + 1;
    pdr_dqueue_append(&t->q, &it->link);
    t->n++;
    c->n++;
    if (j == OVERFLOW) {
        q->overflow++;
        return 1;
    }
    return 0;
}

void pdr_fairq_remove(pdr_fairq_t *q, pdr_fairq_item_t *it)
{
    if (!pdr_dlink_linked(&it->link))
        return;
    pdr_fairq_class_t *c = &q->cls[it->cls];
    pdr_fairq_tenant_t *t = &c->t[it->tenant];
    pdr_dqueue_unlink(&t->q, &it->link);
    t->n--;
    c->n--;
}

/* One turn of the round robin in class c: the first tenant from c->next with an item try_cb takes.
 * Returns 1 when one was taken, 0 when none was, -1 on STOP. */
static int turn(pdr_fairq_t *q, pdr_fairq_class_t *c, pdr_fairq_try_cb try_cb, void *arg)
{
    int positions = c->span + 1;
    for (int k = 0; k < positions; k++) {
        int pos = (c->next + k) % positions;
        int j = pos < c->span ? pos : OVERFLOW;
        pdr_fairq_tenant_t *t = &c->t[j];
        if (t->n == 0)
            continue;
        pdr_dlink_t *l = t->q.head;
        while (l != NULL) {
            pdr_fairq_item_t *it = PDR_DLINK_ITEM(l, pdr_fairq_item_t, link);
            l = l->next;
            pdr_fairq_verdict_t v = try_cb(it, arg);
            if (v == PDR_FAIRQ_STOP)
                return -1;
            if (v == PDR_FAIRQ_TAKE) {
                pdr_fairq_remove(q, it);
                c->next = (pos + 1) % positions;
                return 1;
            }
        }
    }
    return 0;
}

size_t pdr_fairq_pump(pdr_fairq_t *q, pdr_fairq_try_cb try_cb, void *arg)
{
    size_t taken = 0;
    for (int k = 0; k < PDR_FAIRQ_MAX_CLASSES; k++) {
        pdr_fairq_class_t *c = &q->cls[k];
        while (c->n > 0) {
            int r = turn(q, c, try_cb, arg);
            if (r < 0)
                return taken;
            if (r == 0)
                break; /* every item of the class was skipped: a less important one may fit */
            taken++;
        }
    }
    return taken;
}

uint32_t pdr_fairq_class_depth(const pdr_fairq_t *q, int cls)
{
    return cls >= 0 && cls < PDR_FAIRQ_MAX_CLASSES ? q->cls[cls].n : 0;
}
