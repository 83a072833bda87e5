/*
 * The approximate prefix tree (a radix tree over prompt bytes) shared by every tenant of a pool.
 *
 * Invariants:
 *   - every non-root node has a label of at least one byte; siblings differ in their first byte and are
 *     kept sorted by it (binary search);
 *   - a node's tenants are a subset of its parent's (the root holds none): a tenant is on every node of
 *     every path it inserted, so the tenants of the deepest matched node match that whole length;
 *   - a node with no tenant is removed at once (it then has no child either);
 *   - tenant_chars(t) is the sum of the label lengths of the nodes holding t;
 *   - bytes is the exact sum of the sizes of the blocks held (the tree, its tenant table, each node, its
 *     label and its two arrays at their capacities).
 * Access stamps come from a logical clock (one tick per insert), so least recently used is exact and no
 * clock is read. Every public call takes the tree's mutex; see routing.h.
 */
#include "routing.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "routing_internal.h"

typedef struct slot {
    uint64_t id;
    uint64_t stamp;
} slot_t;

typedef struct node {
    struct node *parent;
    char *label;
    uint32_t len;
    uint32_t nchildren, capchildren;
    uint32_t ntenants, captenants;
    struct node **children;
    slot_t *tenants;
} node_t;

typedef struct tenant {
    uint64_t id;
    uint64_t chars;
} tenant_t;

struct pdr_ptree {
    pthread_mutex_t lock;
    node_t root;
    uint64_t max_chars;
    uint64_t clock;
    uint64_t bytes;
    tenant_t *tenants;
    size_t ntenants, captenants;
};

/* Grows or shrinks an array to exactly n elements of size sz, keeping the byte count; a shrink that
 * fails keeps the larger block (and its count). Returns 0 or PDR_ENOMEM. */
static int resize(pdr_ptree_t *t, void **arr, uint32_t *cap, size_t n, size_t sz)
{
    if (n == *cap)
        return 0;
    if (n == 0) {
        free(*arr);
        *arr = NULL;
        t->bytes -= (uint64_t)*cap * sz;
        *cap = 0;
        return 0;
    }
    void *p = realloc(*arr, n * sz);
    if (p == NULL)
        return n > *cap ? PDR_ENOMEM : 0;
    *arr = p;
    t->bytes = t->bytes - (uint64_t)*cap * sz + (uint64_t)n * sz;
    *cap = (uint32_t)n;
    return 0;
}

static slot_t *node_slot(node_t *n, uint64_t id)
{
    for (uint32_t i = 0; i < n->ntenants; i++)
        if (n->tenants[i].id == id)
            return &n->tenants[i];
    return NULL;
}

static int in_set(uint64_t id, const uint64_t *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (set[i] == id)
            return 1;
    return 0;
}

static int node_has_any(node_t *n, const uint64_t *cand, size_t ncand)
{
    if (cand == NULL)
        return n->ntenants > 0;
    for (uint32_t i = 0; i < n->ntenants; i++)
        if (in_set(n->tenants[i].id, cand, ncand))
            return 1;
    return 0;
}

/* The index of the child whose label starts with c, or where it would go (with *found 0). */
static uint32_t child_index(node_t *n, unsigned char c, int *found)
{
    uint32_t lo = 0, hi = n->nchildren;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        unsigned char m = (unsigned char)n->children[mid]->label[0];
        if (m == c) {
            *found = 1;
            return mid;
        }
        if (m < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = 0;
    return lo;
}

static node_t *child_of(node_t *n, unsigned char c)
{
    int found;
    uint32_t i = child_index(n, c, &found);
    return found ? n->children[i] : NULL;
}

static tenant_t *tenant_find(pdr_ptree_t *t, uint64_t id)
{
    for (size_t i = 0; i < t->ntenants; i++)
        if (t->tenants[i].id == id)
            return &t->tenants[i];
    return NULL;
}

static tenant_t *tenant_get(pdr_ptree_t *t, uint64_t id)
{
    tenant_t *te = tenant_find(t, id);
    if (te != NULL)
        return te;
    uint32_t cap = (uint32_t)t->captenants;
    if (t->ntenants == cap && resize(t, (void **)&t->tenants, &cap, t->ntenants + 1, sizeof(tenant_t)) != 0)
        return NULL;
    t->captenants = cap;
    te = &t->tenants[t->ntenants++];
    te->id = id;
    te->chars = 0;
    return te;
}

/* Adds tenant te to n (or refreshes its stamp). Returns 0 or PDR_ENOMEM (n unchanged). */
static int node_touch(pdr_ptree_t *t, node_t *n, tenant_t *te, uint64_t stamp)
{
    slot_t *s = node_slot(n, te->id);
    if (s != NULL) {
        s->stamp = stamp;
        return 0;
    }
    if (n->ntenants == n->captenants &&
        resize(t, (void **)&n->tenants, &n->captenants, n->ntenants + 1, sizeof(slot_t)) != 0)
        return PDR_ENOMEM;
    n->tenants[n->ntenants].id = te->id;
    n->tenants[n->ntenants].stamp = stamp;
    n->ntenants++;
    te->chars += n->len;
    return 0;
}

static void node_drop_slot(pdr_ptree_t *t, node_t *n, slot_t *s)
{
    size_t i = (size_t)(s - n->tenants);
    memmove(&n->tenants[i], &n->tenants[i + 1], (n->ntenants - i - 1) * sizeof(slot_t));
    n->ntenants--;
    resize(t, (void **)&n->tenants, &n->captenants, n->ntenants, sizeof(slot_t));
}

static void node_free(pdr_ptree_t *t, node_t *n)
{
    t->bytes -= sizeof(node_t) + n->len + (uint64_t)n->capchildren * sizeof(node_t *) +
                (uint64_t)n->captenants * sizeof(slot_t);
    free(n->label);
    free(n->children);
    free(n->tenants);
    free(n);
}

/* Unlinks a childless node that no tenant holds any more and frees it. */
static void node_remove(pdr_ptree_t *t, node_t *n)
{
    node_t *p = n->parent;
    int found;
    uint32_t i = child_index(p, (unsigned char)n->label[0], &found);
    memmove(&p->children[i], &p->children[i + 1], (p->nchildren - i - 1) * sizeof(node_t *));
    p->nchildren--;
    resize(t, (void **)&p->children, &p->capchildren, p->nchildren, sizeof(node_t *));
    node_free(t, n);
}

static node_t *node_new(pdr_ptree_t *t, const char *label, size_t len)
{
    node_t *n = calloc(1, sizeof(*n));
    char *l = malloc(len);
    if (n == NULL || l == NULL) {
        free(n);
        free(l);
        return NULL;
    }
    memcpy(l, label, len);
    n->label = l;
    n->len = (uint32_t)len;
    t->bytes += sizeof(node_t) + len;
    return n;
}

/* Splits c (a child of p) after k bytes of its label: a new node with the first k bytes and c's tenants
 * takes c's place, c keeps the rest under it. Tenant counts do not change. Returns the new node, or NULL
 * (nothing changed). */
static node_t *node_split(pdr_ptree_t *t, node_t *p, node_t *c, uint32_t k)
{
    node_t *m = node_new(t, c->label, k);
    char *rest = malloc(c->len - k);
    slot_t *slots = malloc((size_t)c->ntenants * sizeof(slot_t));
    node_t **kids = malloc(sizeof(node_t *));
    if (m == NULL || rest == NULL || slots == NULL || kids == NULL) {
        if (m != NULL)
            node_free(t, m);
        free(rest);
        free(slots);
        free(kids);
        return NULL;
    }
    memcpy(rest, c->label + k, c->len - k);
    memcpy(slots, c->tenants, (size_t)c->ntenants * sizeof(slot_t));
    m->tenants = slots;
    m->ntenants = m->captenants = c->ntenants;
    m->children = kids;
    m->nchildren = m->capchildren = 1;
    kids[0] = c;
    m->parent = p;
    t->bytes += (uint64_t)c->ntenants * sizeof(slot_t) + sizeof(node_t *) - k;
    int found;
    uint32_t i = child_index(p, (unsigned char)c->label[0], &found);
    p->children[i] = m;
    free(c->label);
    c->label = rest;
    c->len -= k;
    c->parent = m;
    return m;
}

/* A new leaf under p holding text[0..len) for te. Returns 0 or PDR_ENOMEM (nothing changed). */
static int leaf_add(pdr_ptree_t *t, node_t *p, const char *text, size_t len, tenant_t *te, uint64_t stamp)
{
    if (len > UINT32_MAX)
        len = UINT32_MAX; /* a longer prompt is recorded by its first 4 GiB */
    node_t *n = node_new(t, text, len);
    if (n == NULL)
        return PDR_ENOMEM;
    if (p->nchildren == p->capchildren &&
        resize(t, (void **)&p->children, &p->capchildren, p->nchildren + 1, sizeof(node_t *)) != 0) {
        node_free(t, n);
        return PDR_ENOMEM;
    }
    if (node_touch(t, n, te, stamp) != 0) {
        node_free(t, n);
        return PDR_ENOMEM;
    }
    int found;
    uint32_t i = child_index(p, (unsigned char)text[0], &found);
    memmove(&p->children[i + 1], &p->children[i], (p->nchildren - i) * sizeof(node_t *));
    p->children[i] = n;
    p->nchildren++;
    n->parent = p;
    return 0;
}

static size_t common_prefix(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen, i = 0;
    while (i + 8 <= n) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y)
            break;
        i += 8;
    }
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* The deepest node on text's path that a candidate holds, and the length matched (which may end inside
 * that node's label). */
static node_t *walk(pdr_ptree_t *t, const char *text, size_t len, const uint64_t *cand, size_t ncand,
                    size_t *matched)
{
    node_t *n = &t->root, *deepest = NULL;
    size_t pos = 0;
    while (pos < len) {
        node_t *c = child_of(n, (unsigned char)text[pos]);
        if (c == NULL || !node_has_any(c, cand, ncand))
            break;
        size_t k = common_prefix(c->label, c->len, text + pos, len - pos);
        pos += k;
        deepest = c;
        if (k < c->len)
            break;
        n = c;
    }
    *matched = pos;
    return deepest;
}

static int evict_tenant(pdr_ptree_t *t, tenant_t *te, uint64_t max_chars);

static int insert_locked(pdr_ptree_t *t, const char *text, size_t len, uint64_t id)
{
    tenant_t *te = tenant_get(t, id);
    if (te == NULL)
        return PDR_ENOMEM;
    uint64_t stamp = ++t->clock;
    node_t *n = &t->root;
    size_t pos = 0;
    int rc = 0;
    while (pos < len) {
        node_t *c = child_of(n, (unsigned char)text[pos]);
        if (c == NULL) {
            rc = leaf_add(t, n, text + pos, len - pos, te, stamp);
            break;
        }
        size_t k = common_prefix(c->label, c->len, text + pos, len - pos);
        if (k < c->len && (c = node_split(t, n, c, (uint32_t)k)) == NULL) {
            rc = PDR_ENOMEM;
            break;
        }
        if ((rc = node_touch(t, c, te, stamp)) != 0)
            break;
        pos += k;
        n = c;
    }
    if (te->chars > 2 * t->max_chars) {
        int erc = evict_tenant(t, te, t->max_chars);
        if (rc == 0)
            rc = erc;
    }
    return rc;
}

/* The first node after n in a preorder walk of the nodes holding id (n itself holds it or is the root). */
static node_t *next_holding(node_t *root, node_t *n, uint64_t id)
{
    for (uint32_t i = 0; i < n->nchildren; i++)
        if (node_slot(n->children[i], id) != NULL)
            return n->children[i];
    while (n != root) {
        node_t *p = n->parent;
        int found;
        uint32_t i = child_index(p, (unsigned char)n->label[0], &found);
        for (i++; i < p->nchildren; i++)
            if (node_slot(p->children[i], id) != NULL)
                return p->children[i];
        n = p;
    }
    return NULL;
}

static int is_leaf_for(node_t *n, uint64_t id)
{
    for (uint32_t i = 0; i < n->nchildren; i++)
        if (node_slot(n->children[i], id) != NULL)
            return 0;
    return 1;
}

typedef struct heap_item {
    uint64_t stamp;
    node_t *node;
} heap_item_t;

typedef struct heap {
    heap_item_t *items;
    size_t n, cap;
} heap_t;

static int heap_push(heap_t *h, uint64_t stamp, node_t *node)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        heap_item_t *p = realloc(h->items, cap * sizeof(*p));
        if (p == NULL)
            return PDR_ENOMEM;
        h->items = p;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && h->items[(i - 1) / 2].stamp > stamp) {
        h->items[i] = h->items[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->items[i].stamp = stamp;
    h->items[i].node = node;
    return 0;
}

static heap_item_t heap_pop(heap_t *h)
{
    heap_item_t top = h->items[0], last = h->items[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->items[c + 1].stamp < h->items[c].stamp)
            c++;
        if (h->items[c].stamp >= last.stamp)
            break;
        h->items[i] = h->items[c];
        i = c;
    }
    if (h->n > 0)
        h->items[i] = last;
    return top;
}

/* Drops te's least recently used leaves until it holds at most max_chars. A parent's stamp is never older
 * than its children's (every insert stamps the whole path), so a parent that becomes a leaf joins the
 * heap in order. The heap is the only allocation (its own, not counted in bytes: it lives only here). */
static int evict_tenant(pdr_ptree_t *t, tenant_t *te, uint64_t max_chars)
{
    if (te->chars <= max_chars)
        return 0;
    heap_t h = {0};
    int rc = 0;
    for (node_t *n = next_holding(&t->root, &t->root, te->id); n != NULL;
         n = next_holding(&t->root, n, te->id))
        if (is_leaf_for(n, te->id) && (rc = heap_push(&h, node_slot(n, te->id)->stamp, n)) != 0)
            break;
    while (rc == 0 && te->chars > max_chars && h.n > 0) {
        node_t *n = heap_pop(&h).node, *p = n->parent;
        te->chars -= n->len;
        node_drop_slot(t, n, node_slot(n, te->id));
        if (n->ntenants == 0)
            node_remove(t, n);
        if (p != &t->root && is_leaf_for(p, te->id))
            rc = heap_push(&h, node_slot(p, te->id)->stamp, p);
    }
    free(h.items);
    return rc;
}

pdr_ptree_t *pdr_ptree_new(uint64_t max_chars, int *err)
{
    if (max_chars == 0 || max_chars > UINT64_MAX / 4) {
        *err = PDR_EINVAL;
        return NULL;
    }
    pdr_ptree_t *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        *err = PDR_ENOMEM;
        return NULL;
    }
    pthread_mutex_init(&t->lock, NULL);
    t->max_chars = max_chars;
    t->bytes = sizeof(*t);
    *err = 0;
    return t;
}

void pdr_ptree_free(pdr_ptree_t *t)
{
    if (t == NULL)
        return;
    /* Postorder without a stack: descend to a leaf, free it, go back to its parent. */
    node_t *n = &t->root;
    for (;;) {
        if (n->nchildren > 0) {
            n = n->children[n->nchildren - 1];
            continue;
        }
        if (n == &t->root)
            break;
        node_t *p = n->parent;
        p->nchildren--;
        node_free(t, n);
        n = p;
    }
    free(t->root.children);
    free(t->tenants);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

int pdr_ptree_insert(pdr_ptree_t *t, const char *text, size_t len, uint64_t tenant)
{
    if (tenant == 0 || (text == NULL && len > 0))
        return PDR_EINVAL;
    pthread_mutex_lock(&t->lock);
    int rc = insert_locked(t, text, len, tenant);
    pthread_mutex_unlock(&t->lock);
    return rc;
}

size_t pdr_ptree_match(pdr_ptree_t *t, const char *text, size_t len, const uint64_t *cand, size_t n,
                       uint64_t *tenant)
{
    size_t matched = 0;
    *tenant = 0;
    if (text == NULL)
        return 0;
    pthread_mutex_lock(&t->lock);
    node_t *d = walk(t, text, len, cand, n, &matched);
    uint64_t best = 0;
    for (uint32_t i = 0; d != NULL && i < d->ntenants; i++) {
        slot_t *s = &d->tenants[i];
        if ((cand == NULL || in_set(s->id, cand, n)) && s->stamp >= best) {
            best = s->stamp;
            *tenant = s->id;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return matched;
}

uint64_t pdr_ptree_tenant_chars(pdr_ptree_t *t, uint64_t tenant)
{
    pthread_mutex_lock(&t->lock);
    tenant_t *te = tenant_find(t, tenant);
    uint64_t c = te ? te->chars : 0;
    pthread_mutex_unlock(&t->lock);
    return c;
}

size_t pdr_ptree_tenants(pdr_ptree_t *t)
{
    pthread_mutex_lock(&t->lock);
    size_t n = t->ntenants;
    pthread_mutex_unlock(&t->lock);
    return n;
}

void pdr_ptree_remove_tenant(pdr_ptree_t *t, uint64_t id)
{
    pthread_mutex_lock(&t->lock);
    tenant_t *te = tenant_find(t, id);
    if (te != NULL) {
        /* Postorder over the nodes holding id: a node is done once no child holds id any more. */
        node_t *n = &t->root;
        for (;;) {
            node_t *c = NULL;
            for (uint32_t i = 0; i < n->nchildren && c == NULL; i++)
                if (node_slot(n->children[i], id) != NULL)
                    c = n->children[i];
            if (c != NULL) {
                n = c;
                continue;
            }
            if (n == &t->root)
                break;
            node_t *p = n->parent;
            node_drop_slot(t, n, node_slot(n, id));
            if (n->ntenants == 0)
                node_remove(t, n);
            n = p;
        }
        *te = t->tenants[--t->ntenants];
        uint32_t cap = (uint32_t)t->captenants;
        resize(t, (void **)&t->tenants, &cap, t->ntenants, sizeof(tenant_t));
        t->captenants = cap;
    }
    pthread_mutex_unlock(&t->lock);
}

int pdr_ptree_evict(pdr_ptree_t *t, uint64_t max_chars)
{
    int rc = 0;
    pthread_mutex_lock(&t->lock);
    if (max_chars == 0)
        max_chars = t->max_chars;
    for (size_t i = 0; i < t->ntenants; i++) {
        int r = evict_tenant(t, &t->tenants[i], max_chars);
        if (r != 0)
            rc = r;
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}

uint64_t pdr_ptree_bytes(pdr_ptree_t *t)
{
    pthread_mutex_lock(&t->lock);
    uint64_t b = t->bytes;
    pthread_mutex_unlock(&t->lock);
    return b;
}

uint64_t pdr_ptree_bytes_bound(uint64_t tenants, uint64_t max_chars)
{
    /* Each tenant holds at most H = 2 * max_chars bytes of labels, so the tree holds at most T * H label
     * bytes, at most T * H nodes (a label has at least one byte), each the child of one parent, and at
     * most T * H tenant slots (a slot covers at least one of its tenant's bytes). */
    uint64_t h = 2 * max_chars * tenants;
    return sizeof(pdr_ptree_t) + tenants * sizeof(tenant_t) +
           h * (1 + sizeof(node_t) + sizeof(node_t *) + sizeof(slot_t));
}

/* For policy.c (routing_internal.h): one decision in one critical section. */
void pdr__ptree_lock(pdr_ptree_t *t)
{
    pthread_mutex_lock(&t->lock);
}

void pdr__ptree_unlock(pdr_ptree_t *t)
{
    pthread_mutex_unlock(&t->lock);
}

const void *pdr__ptree_walk(pdr_ptree_t *t, const char *text, size_t len, const uint64_t *ids, size_t n,
                            size_t *matched)
{
    return walk(t, text, len, ids, n, matched);
}

int pdr__ptree_node_holds(const void *node, uint64_t id)
{
    return node != NULL && node_slot((node_t *)node, id) != NULL;
}

uint64_t pdr__ptree_chars_locked(pdr_ptree_t *t, uint64_t id)
{
    tenant_t *te = tenant_find(t, id);
    return te ? te->chars : 0;
}

int pdr__ptree_insert_locked(pdr_ptree_t *t, const char *text, size_t len, uint64_t id)
{
    return insert_locked(t, text, len, id);
}
