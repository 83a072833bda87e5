/*
 * The CUDA IPC mover's decode side: the FETCH_IPC a decode offers, its destination cut at allocation
 * boundaries and each piece named by a legacy IPC handle or a VMM slot; VMM allocations are exported once
 * to the fd server and forgotten when their region is unregistered. The prefill's side and the ops table
 * are in mover_ipc.c. Thread 0, except pdr__tcp_mem_unregistered (any thread, under vx_lock).
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include "gpu_cuda.h"
#include "fdpass.h"
#include "err.h"
#include "transport_internal.h"
#include "session.h"
#include "util.h"
#include "mover_ipc_internal.h"

static int vmm_handle_locked(pdr_xfer_engine_t *eng, const struct pdr_cuda_range *r,
                             uint8_t h[PDR_XFER_IPC_HANDLE]);

static int vmm_handle(pdr_xfer_engine_t *eng, const struct pdr_cuda_range *r, uint8_t h[PDR_XFER_IPC_HANDLE])
{
    pthread_mutex_lock(&pdr__tcp_st(eng)->ipc->vx_lock);
    int rc = vmm_handle_locked(eng, r, h);
    pthread_mutex_unlock(&pdr__tcp_st(eng)->ipc->vx_lock);
    return rc;
}

/* The region [addr, addr+len) was unregistered: its exports go (their descriptors pinned the memory). */
void pdr__tcp_mem_unregistered(pdr_xfer_engine_t *eng, const void *addr, size_t len)
{
    struct tcp_state *ts = pdr__tcp_st(eng);
    struct ipc_engine *ie = ts != NULL ? ts->ipc : NULL;
    if (ie == NULL)
        return;
    pthread_mutex_lock(&ie->vx_lock);
    size_t k = 0;
    for (size_t i = 0; i < ie->nvx; i++) {
        uintptr_t b = (uintptr_t)ie->vx[i].base, a = (uintptr_t)addr;
        if (b >= a && b - a < len)
            pdr__fdsrv_drop(ie->fdsrv, ie->vx[i].id);
        else
            ie->vx[k++] = ie->vx[i];
    }
    ie->nvx = k;
    pthread_mutex_unlock(&ie->vx_lock);
}

/* The handle slot for the VMM allocation r (exported once, then cached while the same physical
 * allocation is mapped at the same place); vx_lock held. Thread 0. */
static int vmm_handle_locked(pdr_xfer_engine_t *eng, const struct pdr_cuda_range *r,
                             uint8_t h[PDR_XFER_IPC_HANDLE])
{
    struct ipc_engine *ie = pdr__tcp_st(eng)->ipc;
    struct vmm_export *x = NULL;
    for (size_t i = 0; i < ie->nvx; i++) {
        if (ie->vx[i].base != r->base)
            continue;
        if (ie->vx[i].size == r->size && ie->vx[i].block_id == r->block_id) {
            x = &ie->vx[i];
        } else { /* freed and created again: the old descriptor would name the old memory */
            pdr__fdsrv_drop(ie->fdsrv, ie->vx[i].id);
            memmove(&ie->vx[i], &ie->vx[i + 1], (ie->nvx - i - 1) * sizeof(*ie->vx));
            ie->nvx--;
        }
        break;
    }
    if (x == NULL) {
        int rc = ie->fdsrv == NULL ? pdr__fdsrv_start(&ie->fdsrv) : 0;
        if (rc == 0 && ie->nvx == ie->cvx) {
            if (ie->cvx == VMM_EXPORTS_MAX) { /* let the oldest go */
                pdr__fdsrv_drop(ie->fdsrv, ie->vx[0].id);
                memmove(&ie->vx[0], &ie->vx[1], (ie->nvx - 1) * sizeof(*ie->vx));
                ie->nvx--;
            } else {
                if (pdr__ipc_grow((void **)&ie->vx, &ie->cvx, 16, sizeof(*ie->vx)) != 0)
                    return PDR_ENOMEM;
            }
        }
        int fd = -1;
        uint64_t id = 0;
        if (rc == 0)
            rc = pdr__cuda_vmm_export(r->base, &fd);
        if (rc == 0)
            rc = pdr__fdsrv_add(ie->fdsrv, fd, &id);
        if (rc != 0)
            return rc;
        x = &ie->vx[ie->nvx++];
        x->base = r->base;
        x->size = r->size;
        x->block_id = r->block_id;
        x->id = id;
    }
    memset(h, 0, PDR_XFER_IPC_HANDLE);
    memcpy(h, VMM_TAG, sizeof(VMM_TAG));
    pdr__put_u32(h + 8, pdr__fdsrv_pid(ie->fdsrv));
    pdr__put_u64(h + 16, pdr__fdsrv_nonce(ie->fdsrv));
    pdr__put_u64(h + 24, x->id);
    pdr__put_u64(h + 32, x->size);
    return 0;
}

/* FETCH_IPC for op: its destination cut at allocation boundaries (a segment may span several cuMemAlloc
 * allocations or VMM mappings), each piece named by its allocation's handle (legacy CUDA IPC, or a VMM
 * slot) and its offset inside it. NULL when it cannot be exported: the caller sends a plain FETCH. */
struct ctl_msg *pdr__fetch_ipc_msg(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    size_t cap = op->nseg + 1, np = 0;
    uint8_t *handles = malloc((size_t)PDR_XFER_IPC_MAX_HANDLES * PDR_XFER_IPC_HENTRY);
    size_t *lens = malloc(cap * sizeof(*lens));
    uint32_t *hidx = malloc(cap * sizeof(*hidx));
    uint64_t *offs = malloc(cap * sizeof(*offs));
    struct ctl_msg *m = NULL;
    uint32_t nh = 0;
    unsigned char uuid[16] = {0};
    int rc = handles != NULL && lens != NULL && hidx != NULL && offs != NULL
                 ? pdr__io_bind(&eng->io[0], op->dev)
                 : PDR_ENOMEM;
    if (rc == 0)
        pdr__cuda_uuid(op->dev, uuid);
    uint8_t *last_base = NULL; /* the allocation of the previous piece (KV pages share a few pools) */
    uint64_t last_size = 0;
    uint32_t last_k = 0;
    for (size_t i = 0; i < op->nseg && rc == 0; i++) {
        uint8_t *p = op->segs[i].addr;
        uint64_t left = op->segs[i].len;
        int first = 1;
        while ((left > 0 || first) && rc == 0) {
            first = 0;
            uint64_t off = 0, n = 0;
            uint32_t k = 0; /* a zero-length segment: index 0, offset 0, never dereferenced */
            if (left > 0 && last_base != NULL && p >= last_base && (uint64_t)(p - last_base) < last_size) {
                off = (uint64_t)(p - last_base); /* inside the previous piece's allocation */
                k = last_k;
                n = last_size - off;
            } else if (left > 0) {
                struct pdr_cuda_range r;
                uint8_t h[PDR_XFER_IPC_HANDLE];
                rc = pdr__cuda_mem_range(p, &r);
                if (rc == 0 && r.vmm) {
                    off = (uint64_t)(p - (uint8_t *)r.base);
                    rc = vmm_handle(eng, &r, h);
                } else if (rc == 0) {
                    rc = pdr__cuda_ipc_export(p, h, &off);
                }
                if (rc != 0)
                    break;
                while (k < nh && memcmp(handles + (size_t)k * PDR_XFER_IPC_HENTRY, h, sizeof(h)) != 0)
                    k++;
                if (k == nh) {
                    if (nh == PDR_XFER_IPC_MAX_HANDLES) {
                        rc = PDR_ETOOBIG;
                        break;
                    }
                    memcpy(handles + (size_t)k * PDR_XFER_IPC_HENTRY, h, sizeof(h));
                    memcpy(handles + (size_t)k * PDR_XFER_IPC_HENTRY + PDR_XFER_IPC_HANDLE, uuid,
                           sizeof(uuid));
                    nh++;
                }
                last_base = p - off; /* the allocation (legacy) or mapping (VMM) that holds p */
                last_size = r.size;
                last_k = k;
                n = r.size - off;
            }
            if (n > left)
                n = left;
            if (np == cap) {
                rc = cap >= PDR_XFER_IPC_MAX_SEGS ? PDR_ETOOBIG : PDR_ENOMEM;
                if (rc == PDR_ENOMEM) {
                    cap *= 2;
                    size_t *l2 = realloc(lens, cap * sizeof(*lens));
                    if (l2 != NULL)
                        lens = l2;
                    uint32_t *h2 = realloc(hidx, cap * sizeof(*hidx));
                    if (h2 != NULL)
                        hidx = h2;
                    uint64_t *o2 = realloc(offs, cap * sizeof(*offs));
                    if (o2 != NULL)
                        offs = o2;
                    if (l2 != NULL && h2 != NULL && o2 != NULL)
                        rc = 0;
                }
                if (rc != 0)
                    break;
            }
            lens[np] = (size_t)n;
            hidx[np] = k;
            offs[np++] = off;
            p += n;
            left -= n;
        }
    }
    if (rc == 0 && np > PDR_XFER_IPC_MAX_SEGS)
        rc = PDR_ETOOBIG;
    if (rc == 0 && nh == 0) {
        memset(handles, 0, PDR_XFER_IPC_HENTRY); /* an empty room still needs a table entry to point at */
        nh = 1;
    }
    size_t len = rc == 0 ? pdr__xfer_fetch_ipc_size((uint32_t)np, nh) : 0;
    if (rc == 0 && (m = pdr__ctl_new(len)) == NULL)
        rc = PDR_ENOMEM;
    if (rc == 0) {
        m->len = pdr__xfer_fetch_ipc_encode(m->data, len, op->room, op->xid, op->total, op->timeout_ms,
                                            np > 0 ? lens : NULL, sizeof(*lens), (uint32_t)np, handles, nh,
                                            hidx, offs);
        if (m->len == 0)
            rc = PDR_ETOOBIG;
    }
    free(handles);
    free(lens);
    free(hidx);
    free(offs);
    if (rc != 0) {
        pdr_warn("transport: cannot export CUDA IPC handles for room %llu (%s: %s); using tcp staging",
                 (unsigned long long)op->room, pdr_strerror(rc), pdr__cuda_last_error());
        pdr__ctl_free(m);
        return NULL;
    }
    return m;
}
