/* Knobs and counters of the fake libibverbs (rdma_fake_verbs.c), for the tests that link it. */
#ifndef PDR_TEST_RDMA_FAKE_VERBS_H
#define PDR_TEST_RDMA_FAKE_VERBS_H
#include <stdint.h>

struct fake_verbs_state {
    /* knobs, set before pdr__rdma_open */
    int ndev;            /* 0: ibv_get_device_list returns NULL with ENOSYS */
    int link_layer;      /* IBV_LINK_LAYER_INFINIBAND or IBV_LINK_LAYER_ETHERNET */
    int max_qp_wr;       /* 0: 16384 */
    int max_cqe;         /* 0: 4194303 */
    uint32_t max_msg_sz; /* port max_msg_sz; 0: 1 GiB */
    int fail_at_wr;      /* the WRITE that makes `writes` reach this fails; 0: never */
    /* counters */
    int writes;     /* plain RDMA WRITEs posted so far (fail_at_wr counts these) */
    int violations; /* things real hardware would refuse or break on */
    int live_qps, live_mrs, imms;
    uint32_t max_sq_used; /* deepest send queue seen */
    uint64_t posted_wrs, bytes_written;
    uint32_t cq_size;
};
extern struct fake_verbs_state fake_verbs;
/* One counter of fake_verbs read under the fake's lock: its threads write the counters under it, so a test
 * that reads one while an engine runs (or just before destroying it) reads through this. */
int fake_verbs_counter(const int *counter);
#endif
