/*
 * mover_ipc_internal.h — what the CUDA IPC mover's two files share: its engine-wide state (struct
 * ipc_engine), the VMM exports and the tag of a VMM handle slot, and the array-doubling helper.
 * mover_ipc.c: the prefill's side (opening the peer's handles, device-to-device copies, IPC_DONE) and the
 * mover's ops table; mover_ipc_export.c: the decode's side (its destination exported as FETCH_IPC handles,
 * VMM allocations through the fd server). Only those two files include it.
 */
#ifndef PDR_TRANSPORT_MOVER_IPC_INTERNAL_H
#define PDR_TRANSPORT_MOVER_IPC_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "dlist.h"

struct pdr__fdsrv;

#define IPC_MAX_DEVS 64

/* A VMM allocation this (decode) engine exported: the fd server holds its descriptor under id. */
struct vmm_export {
    void *base;
    uint64_t size, block_id, id;
};
#define VMM_EXPORTS_MAX 1024
/* A FETCH_IPC handle slot that names a VMM allocation instead of holding a CUipcMemHandle: this tag
 * (8 bytes with its NUL), then the exporter's fd server (pid u32 at 8, nonce u64 at 16), the
 * descriptor's id (u64 at 24) and the allocation's size (u64 at 32); the rest zero. */
#define VMM_TAG "PDRVMM1"

/* The mover's engine-wide state (tcp_state.ipc). */
struct ipc_engine {
    pdr_dlink_t *ipc_pending;       /* pushes whose CUDA IPC copies are in flight (ipc_room's link) */
    void *ipc_stream[IPC_MAX_DEVS]; /* thread 0's stream per source device, for IPC copies */
    struct pdr__fdsrv *fdsrv;       /* started by the first VMM export (thread 0) */
    pthread_mutex_t vx_lock;        /* vx: thread 0 exports, mem_unregister (any thread) forgets */
    struct vmm_export *vx;          /* exported VMM allocations, oldest first */
    size_t nvx, cvx;
};

/* mover_ipc.c: doubles the array *arr of *cap elements of size bytes (first: the capacity of an empty
 * one); -1 when out of memory (the array is left as it was). The callers bound *cap. */
int pdr__ipc_grow(void **arr, size_t *cap, size_t first, size_t size);

#endif
