/*
 * Unit tests of the RDMA backend's pure parts (no device needed): descriptor pack/unpack round trips,
 * golden bytes and every rejection; the QP state machine over every (state, event) pair; the write plan
 * (splitting at both sides' boundaries and at the WR size, batches, QP spreading, IMM placement,
 * limits); the NIC choice over a fake sysfs tree built in a mkdtemp directory. Single-threaded.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "runner.h"
#include "err.h"
#include "rdma.h"

/* ------------------------------------------------------------------------------------------------- */

static struct pdr_rdma_ep_info sample_ep(unsigned nqp, int eth)
{
    struct pdr_rdma_ep_info e;
    memset(&e, 0, sizeof(e));
    e.nqp = (uint8_t)nqp;
    e.link_layer = eth ? PDR_RDMA_LINK_ETH : PDR_RDMA_LINK_IB;
    e.mtu = 5;
    e.gid_index = 3;
    e.lid = eth ? 0 : 0x1234;
    if (eth) {
        e.gid[10] = 0xff;
        e.gid[11] = 0xff;
        e.gid[12] = 10;
        e.gid[15] = 7;
    }
    for (unsigned i = 0; i < nqp; i++) {
        e.qpn[i] = 0x100 + i * 0x1111;
        e.psn[i] = (0xABCDE0u + i) & 0xFFFFFF;
    }
    return e;
}

static void test_ep_desc(void)
{
    uint8_t buf[PDR_RDMA_EP_MAX_BYTES + 8];
    struct pdr_rdma_ep_info out;
    unsigned nqps[] = {1, 2, 16};
    for (int eth = 0; eth < 2; eth++) {
        for (size_t k = 0; k < sizeof(nqps) / sizeof(nqps[0]); k++) {
            struct pdr_rdma_ep_info e = sample_ep(nqps[k], eth);
            size_t n = pdr__rdma_pack_ep(&e, buf, sizeof(buf));
            CHECK(n == pdr__rdma_ep_wire_size(nqps[k]));
            CHECK(n == (size_t)PDR_RDMA_EP_FIXED + nqps[k] * PDR_RDMA_EP_PER_QP);
            CHECK(pdr__rdma_unpack_ep(buf, n, &out) == 0);
            CHECK(out.version == PDR_RDMA_EP_VERSION && out.nqp == e.nqp && out.link_layer == e.link_layer);
            CHECK(out.mtu == e.mtu && out.gid_index == e.gid_index && out.lid == e.lid);
            CHECK(memcmp(out.gid, e.gid, 16) == 0);
            CHECK(memcmp(out.qpn, e.qpn, sizeof(e.qpn)) == 0 && memcmp(out.psn, e.psn, sizeof(e.psn)) == 0);
            /* Every truncation and one trailing byte are rejected. */
            for (size_t cut = 0; cut < n; cut++)
                CHECK(pdr__rdma_unpack_ep(buf, cut, &out) == PDR_EPROTO);
            CHECK(pdr__rdma_unpack_ep(buf, n + 1, &out) == PDR_EPROTO);
            /* A buffer one byte too small for pack. */
            CHECK(pdr__rdma_pack_ep(&e, buf, n - 1) == 0);
        }
    }

    /* Golden bytes: little-endian, fixed layout. */
    struct pdr_rdma_ep_info g = sample_ep(1, 0);
    g.qpn[0] = 0x00123456;
    g.psn[0] = 0x00ABCDEF;
    size_t n = pdr__rdma_pack_ep(&g, buf, sizeof(buf));
    static const uint8_t golden[] = {1, 1, 1, 5, 3, 0, 0x34, 0x12, 0,    0,    0,    0,    0,    0,    0,   0,
                                     0, 0, 0, 0, 0, 0, 0,    0,    0x56, 0x34, 0x12, 0x00, 0xEF, 0xCD, 0xAB};
    CHECK(n == sizeof(golden) && memcmp(buf, golden, sizeof(golden)) == 0);

    /* Field-by-field rejections, each from the valid golden encoding. */
    static const struct {
        size_t off;
        uint8_t val;
    } bad[] = {
        {0, 0}, {0, 2},  /* version */
        {1, 0}, {1, 17}, /* nqp (17 also breaks the length) */
        {2, 0}, {2, 3},  /* link layer */
        {3, 0}, {3, 6},  /* mtu */
        {5, 1},          /* reserved */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t m[sizeof(golden)];
        memcpy(m, golden, sizeof(m));
        m[bad[i].off] = bad[i].val;
        CHECK(pdr__rdma_unpack_ep(m, sizeof(m), &out) == PDR_EPROTO);
    }
    {
        uint8_t m[sizeof(golden)];
        memcpy(m, golden, sizeof(m));
        m[6] = m[7] = 0; /* LID 0 on IB */
        CHECK(pdr__rdma_unpack_ep(m, sizeof(m), &out) == PDR_EPROTO);
        memcpy(m, golden, sizeof(m));
        m[2] = PDR_RDMA_LINK_ETH; /* zero GID on Ethernet */
        CHECK(pdr__rdma_unpack_ep(m, sizeof(m), &out) == PDR_EPROTO);
        m[8 + 15] = 1; /* now a GID: valid (LID is ignored on Ethernet) */
        CHECK(pdr__rdma_unpack_ep(m, sizeof(m), &out) == 0);
        memcpy(m, golden, sizeof(m));
        m[24] = 1; /* qpn 0x123401 → 1 */
        m[25] = m[26] = m[27] = 0;
        CHECK(pdr__rdma_unpack_ep(m, sizeof(m), &out) == PDR_EPROTO);
        m[24] = 0; /* qpn 0 */
        CHECK(pdr__rdma_unpack_ep(m, sizeof(m), &out) == PDR_EPROTO);
        m[24] = 2; /* qpn 2: the smallest ordinary QP */
        CHECK(pdr__rdma_unpack_ep(m, sizeof(m), &out) == 0);
        m[27] = 1; /* qpn 2^24 + 2: more than 24 bits */
        CHECK(pdr__rdma_unpack_ep(m, sizeof(m), &out) == PDR_EPROTO);
    }
    /* pack refuses what unpack would. */
    struct pdr_rdma_ep_info e = sample_ep(2, 1);
    e.psn[1] = 0x1000000;
    CHECK(pdr__rdma_pack_ep(&e, buf, sizeof(buf)) == 0);
    e = sample_ep(2, 0);
    e.nqp = 0;
    CHECK(pdr__rdma_pack_ep(&e, buf, sizeof(buf)) == 0);
    e.nqp = PDR_RDMA_MAX_QP + 1;
    CHECK(pdr__rdma_pack_ep(&e, buf, sizeof(buf)) == 0);
    e = sample_ep(2, 0);
    e.mtu = 0;
    CHECK(pdr__rdma_pack_ep(&e, buf, sizeof(buf)) == 0);
    e = sample_ep(2, 0);
    e.qpn[1] = 1;
    CHECK(pdr__rdma_pack_ep(&e, buf, sizeof(buf)) == 0);
    CHECK(pdr__rdma_pack_ep(NULL, buf, sizeof(buf)) == 0);
    CHECK(pdr__rdma_unpack_ep(NULL, 24, &out) == PDR_EPROTO);
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void test_mem_desc(void)
{
    struct pdr_rdma_seg segs[3] = {
        {0x1000, 100, 0x11}, {0x7fff00000000ull, 1ull << 33, 0x22}, {0x10, 1, 0x33}};
    uint8_t buf[256];
    struct pdr_rdma_seg out[4];
    uint32_t nseg = 0;
    uint64_t total = 0;
    size_t n = pdr__rdma_pack_mem(segs, 3, buf, sizeof(buf));
    CHECK(n == pdr__rdma_mem_wire_size(3) && n == 16 + 3 * 20);
    CHECK(pdr__rdma_unpack_mem(buf, n, out, 4, &nseg, &total) == 0);
    CHECK(nseg == 3 && total == 101 + (1ull << 33));
    for (int i = 0; i < 3; i++)
        CHECK(out[i].addr == segs[i].addr && out[i].len == segs[i].len && out[i].key == segs[i].key);
    CHECK(pdr__rdma_peek_mem(buf, n, &nseg, &total) == 0 && nseg == 3);
    /* Golden header and first segment. */
    static const uint8_t hdr[16 + 20] = {1, 0, 0, 0, 3, 0, 0,   0, 101, 0, 0, 0, 2, 0, 0,    0, 0, 0x10,
                                         0, 0, 0, 0, 0, 0, 100, 0, 0,   0, 0, 0, 0, 0, 0x11, 0, 0, 0};
    CHECK(memcmp(buf, hdr, sizeof(hdr)) == 0);

    for (size_t cut = 0; cut < n; cut++)
        CHECK(pdr__rdma_unpack_mem(buf, cut, out, 4, &nseg, &total) == PDR_EPROTO);
    CHECK(pdr__rdma_unpack_mem(buf, n + 1, out, 4, &nseg, &total) == PDR_EPROTO);
    CHECK(pdr__rdma_unpack_mem(buf, n, out, 2, &nseg, &total) == PDR_ETOOBIG);
    CHECK(pdr__rdma_unpack_mem(buf, n, NULL, 4, &nseg, &total) == PDR_ETOOBIG);

    uint8_t m[256];
#define MUT(stmt, expect)                                                                                    \
    do {                                                                                                     \
        memcpy(m, buf, n);                                                                                   \
        stmt;                                                                                                \
        CHECK(pdr__rdma_unpack_mem(m, n, out, 4, &nseg, &total) == (expect));                                \
    } while (0)
    MUT(m[0] = 0, PDR_EPROTO);                                /* version */
    MUT(m[0] = 2, PDR_EPROTO);                                /* version */
    MUT(m[2] = 1, PDR_EPROTO);                                /* reserved */
    MUT(put_le(m + 4, 0, 4), PDR_EPROTO);                     /* nseg 0 */
    MUT(put_le(m + 4, 2, 4), PDR_EPROTO);                     /* nseg vs length */
    MUT(put_le(m + 4, PDR_RDMA_MAX_SEGS + 1, 4), PDR_EPROTO); /* above the limit */
    MUT(put_le(m + 8, 100, 8), PDR_EPROTO);                   /* total differs */
    MUT(put_le(m + 16 + 8, 0, 8), PDR_EPROTO);                /* empty segment */
    MUT(put_le(m + 16, UINT64_MAX - 10, 8), PDR_EPROTO);      /* segment wraps */
    MUT(put_le(m + 16 + 20 + 8, 1ull << 63, 8);               /* sum overflows */
        put_le(m + 16 + 40 + 8, 1ull << 63, 8); put_le(m + 16 + 20, 0, 8); put_le(m + 16 + 40, 0, 8);
        put_le(m + 8, 100, 8), /* the total the wrapped sum would give */
        PDR_EPROTO);
    MUT(put_le(m + 16 + 16, 0xdeadbeef, 4), 0); /* rkeys are opaque */
#undef MUT
    /* The largest descriptor. */
    size_t big = pdr__rdma_mem_wire_size(PDR_RDMA_MAX_SEGS);
    uint8_t *bb = malloc(big);
    struct pdr_rdma_seg *many = calloc(PDR_RDMA_MAX_SEGS + 1, sizeof(*many));
    struct pdr_rdma_seg *back = calloc(PDR_RDMA_MAX_SEGS, sizeof(*back));
    CHECK(bb != NULL && many != NULL && back != NULL);
    for (uint32_t i = 0; i <= PDR_RDMA_MAX_SEGS; i++)
        many[i] = (struct pdr_rdma_seg){(uint64_t)i << 20, 4096 + i, i};
    CHECK(pdr__rdma_pack_mem(many, PDR_RDMA_MAX_SEGS, bb, big) == big);
    CHECK(pdr__rdma_unpack_mem(bb, big, back, PDR_RDMA_MAX_SEGS, &nseg, &total) == 0);
    CHECK(nseg == PDR_RDMA_MAX_SEGS &&
          memcmp(&back[PDR_RDMA_MAX_SEGS - 1], &many[PDR_RDMA_MAX_SEGS - 1], sizeof(back[0])) == 0);
    CHECK(pdr__rdma_pack_mem(many, PDR_RDMA_MAX_SEGS + 1, bb, big) == 0);
    free(bb);
    free(many);
    free(back);
    /* pack refuses. */
    CHECK(pdr__rdma_pack_mem(segs, 0, buf, sizeof(buf)) == 0);
    CHECK(pdr__rdma_pack_mem(segs, 3, buf, n - 1) == 0);
    struct pdr_rdma_seg z[2] = {{1, 1, 0}, {2, 0, 0}};
    CHECK(pdr__rdma_pack_mem(z, 2, buf, sizeof(buf)) == 0);
    struct pdr_rdma_seg w[1] = {{UINT64_MAX, 2, 0}};
    CHECK(pdr__rdma_pack_mem(w, 1, buf, sizeof(buf)) == 0);
}

/* ------------------------------------------------------------------------------------------------- */

static void test_state_machine(void)
{
    enum {
        N = PDR_RDMA_QPS_NONE,
        R = PDR_RDMA_QPS_RESET,
        I = PDR_RDMA_QPS_INIT,
        T = PDR_RDMA_QPS_RTR,
        S = PDR_RDMA_QPS_RTS,
        E = PDR_RDMA_QPS_ERR,
        D = PDR_RDMA_QPS_DESTROYED,
        X = -1
    };
    enum {
        a0 = PDR_RDMA_QPA_NONE,
        aI = PDR_RDMA_QPA_MODIFY_INIT,
        aR = PDR_RDMA_QPA_MODIFY_RTR,
        aS = PDR_RDMA_QPA_MODIFY_RTS,
        aF = PDR_RDMA_QPA_FLUSH_FAIL,
        aD = PDR_RDMA_QPA_DESTROY
    };
    /* expected[state][event] = {next, action}; X: invalid. Events: create, local_init_done,
     * remote_info_received, rtr_done, rts_done, error, destroy. */
    static const int expected[PDR_RDMA_QPS__COUNT][PDR_RDMA_QPE__COUNT][2] = {
        [N] = {{R, aI}, {X}, {X}, {X}, {X}, {X}, {X}},
        [R] = {{X}, {I, a0}, {X}, {X}, {X}, {E, aF}, {D, aD}},
        [I] = {{X}, {X}, {I, aR}, {T, aS}, {X}, {E, aF}, {D, aD}},
        [T] = {{X}, {X}, {X}, {X}, {S, a0}, {E, aF}, {D, aD}},
        [S] = {{X}, {X}, {X}, {X}, {X}, {E, aF}, {D, aD}},
        [E] = {{X}, {X}, {X}, {X}, {X}, {E, a0}, {D, aD}},
        [D] = {{X}, {X}, {X}, {X}, {X}, {X}, {X}},
    };
    int valid = 0, invalid = 0;
    for (int s = 0; s < PDR_RDMA_QPS__COUNT; s++) {
        for (int e = 0; e < PDR_RDMA_QPE__COUNT; e++) {
            enum pdr_rdma_qp_state next = (enum pdr_rdma_qp_state)99;
            enum pdr_rdma_qp_action act = (enum pdr_rdma_qp_action)99;
            int rc = pdr__rdma_qp_step((enum pdr_rdma_qp_state)s, (enum pdr_rdma_qp_event)e, &next, &act);
            int want = expected[s][e][0];
            /* {X} rows leave the action 0, which is what an invalid step reports too. */
            if (want == X) {
                if (rc != PDR_EINVAL || (int)next != s || act != PDR_RDMA_QPA_NONE)
                    fprintf(stderr, "state %s event %s should be invalid\n", pdr__rdma_qp_state_name(s),
                            pdr__rdma_qp_event_name(e));
                CHECK(rc == PDR_EINVAL && (int)next == s && act == PDR_RDMA_QPA_NONE);
                invalid++;
            } else {
                if (rc != 0 || (int)next != want || (int)act != expected[s][e][1])
                    fprintf(stderr, "state %s event %s: rc %d next %s action %s\n",
                            pdr__rdma_qp_state_name(s), pdr__rdma_qp_event_name(e), rc,
                            pdr__rdma_qp_state_name(next), pdr__rdma_qp_action_name(act));
                CHECK(rc == 0 && (int)next == want && (int)act == expected[s][e][1]);
                valid++;
            }
        }
    }
    CHECK(valid == 15 && invalid == 49 - 15);
    /* Out-of-range inputs and NULL outputs. */
    CHECK(pdr__rdma_qp_step(PDR_RDMA_QPS_NONE, (enum pdr_rdma_qp_event)77, NULL, NULL) == PDR_EINVAL);
    CHECK(pdr__rdma_qp_step(PDR_RDMA_QPS_NONE, PDR_RDMA_QPE_CREATE, NULL, NULL) == 0);
    /* The happy path, as rdma.c drives it. */
    enum pdr_rdma_qp_state st = PDR_RDMA_QPS_NONE;
    enum pdr_rdma_qp_action act;
    static const enum pdr_rdma_qp_event path[] = {PDR_RDMA_QPE_CREATE, PDR_RDMA_QPE_LOCAL_INIT_DONE,
                                                  PDR_RDMA_QPE_REMOTE_INFO, PDR_RDMA_QPE_RTR_DONE,
                                                  PDR_RDMA_QPE_RTS_DONE};
    static const enum pdr_rdma_qp_action acts[] = {PDR_RDMA_QPA_MODIFY_INIT, PDR_RDMA_QPA_NONE,
                                                   PDR_RDMA_QPA_MODIFY_RTR, PDR_RDMA_QPA_MODIFY_RTS,
                                                   PDR_RDMA_QPA_NONE};
    for (int i = 0; i < 5; i++) {
        CHECK(pdr__rdma_qp_step(st, path[i], &st, &act) == 0);
        CHECK(act == acts[i]);
    }
    CHECK(st == PDR_RDMA_QPS_RTS);
    CHECK(strcmp(pdr__rdma_qp_state_name(PDR_RDMA_QPS_RTS), "RTS") == 0);
    CHECK(strcmp(pdr__rdma_qp_state_name(42), "?") == 0 && strcmp(pdr__rdma_qp_event_name(-1), "?") == 0);
    CHECK(strcmp(pdr__rdma_qp_action_name(PDR_RDMA_QPA_FLUSH_FAIL), "FLUSH_FAIL") == 0);
    CHECK(strcmp(pdr__rdma_qp_action_name(6), "?") == 0);
}

/* ------------------------------------------------------------------------------------------------- */

/* Byte offset k of a segment list → address, the index of its segment. */
static uint64_t seg_addr(const struct pdr_rdma_seg *s, uint32_t n, uint64_t k, uint32_t *idx)
{
    for (uint32_t i = 0; i < n; i++) {
        if (k < s[i].len) {
            *idx = i;
            return s[i].addr + k;
        }
        k -= s[i].len;
    }
    *idx = UINT32_MAX;
    return 0;
}

/* Expected count: pieces between the union of both sides' boundaries, each cut at max. */
static size_t expected_wrs(const struct pdr_rdma_seg *l, uint32_t nl, const struct pdr_rdma_seg *r,
                           uint32_t nr, uint64_t max)
{
    uint64_t bounds[256];
    size_t nb = 0;
    uint64_t acc = 0;
    for (uint32_t i = 0; i < nl; i++)
        bounds[nb++] = acc += l[i].len;
    acc = 0;
    for (uint32_t i = 0; i < nr; i++)
        bounds[nb++] = acc += r[i].len;
    /* Sort and dedupe (tiny insertion sort). */
    for (size_t i = 1; i < nb; i++)
        for (size_t j = i; j > 0 && bounds[j - 1] > bounds[j]; j--) {
            uint64_t t = bounds[j];
            bounds[j] = bounds[j - 1];
            bounds[j - 1] = t;
        }
    size_t count = 0;
    uint64_t prev = 0;
    for (size_t i = 0; i < nb; i++) {
        if (bounds[i] == prev)
            continue;
        count += (bounds[i] - prev + max - 1) / max;
        prev = bounds[i];
    }
    return count;
}

/* Checks every property of a plan; returns the number of data WRs. */
static size_t verify_plan(const struct pdr_rdma_seg *l, uint32_t nl, const struct pdr_rdma_seg *r,
                          uint32_t nr, const struct pdr_rdma_plan_limits *lim, uint64_t tag)
{
    size_t nwr = 0;
    uint32_t nb = 0;
    CHECK(pdr__rdma_plan(l, nl, r, nr, lim, tag, NULL, 0, &nwr, &nb) == 0);
    struct pdr_rdma_wr *w = calloc(nwr, sizeof(*w));
    size_t nwr2 = 0;
    uint32_t nb2 = 0;
    CHECK(w != NULL);
    CHECK(pdr__rdma_plan(l, nl, r, nr, lim, tag, w, nwr - 1, &nwr2, &nb2) == PDR_ETOOBIG);
    CHECK(pdr__rdma_plan(l, nl, r, nr, lim, tag, w, nwr, &nwr2, &nb2) == 0);
    CHECK(nwr2 == nwr && nb2 == nb);
    uint32_t maxb = lim->max_wr_bytes ? lim->max_wr_bytes : PDR_RDMA_WR_BYTES;
    uint32_t bw = lim->batch_wrs ? lim->batch_wrs : PDR_RDMA_BATCH_WRS;
    uint32_t nqp = lim->nqp ? lim->nqp : 1;
    size_t ndata = nwr - 1;
    CHECK(ndata == expected_wrs(l, nl, r, nr, maxb));
    CHECK(nb == (ndata + bw - 1) / bw);
    uint64_t off = 0;
    for (size_t i = 0; i < ndata; i++) {
        uint32_t li, li2, ri, ri2;
        CHECK(w[i].len > 0 && w[i].len <= maxb);
        CHECK(w[i].laddr == seg_addr(l, nl, off, &li));
        CHECK(w[i].raddr == seg_addr(r, nr, off, &ri));
        /* The whole WR lies in one segment on each side. */
        seg_addr(l, nl, off + w[i].len - 1, &li2);
        seg_addr(r, nr, off + w[i].len - 1, &ri2);
        CHECK(li == li2 && ri == ri2);
        CHECK(li < nl && w[i].lkey == l[li].key && ri < nr && w[i].rkey == r[ri].key);
        CHECK(w[i].batch == i / bw && w[i].qp == (i / bw) % nqp);
        int sig = (i + 1) % bw == 0 || i + 1 == ndata;
        CHECK(w[i].flags == (sig ? PDR_RDMA_WR_SIGNALED : 0));
        off += w[i].len;
    }
    /* The final entry: 0-byte WRITE_WITH_IMM, own batch, QP 0, signaled, low 32 bits of the tag. */
    const struct pdr_rdma_wr *imm = &w[ndata];
    CHECK(imm->flags == (PDR_RDMA_WR_IMM | PDR_RDMA_WR_SIGNALED) && imm->len == 0 && imm->qp == 0);
    CHECK(imm->batch == nb && imm->imm == (uint32_t)tag && imm->rkey == r[0].key && imm->raddr == r[0].addr);
    /* Every QP that should carry data does. */
    for (uint32_t q = 0; q < nqp && q < nb; q++) {
        int seen = 0;
        for (size_t i = 0; i < ndata; i++)
            seen |= w[i].qp == q;
        CHECK(seen);
    }
    free(w);
    return ndata;
}

static void test_plan(void)
{
    const uint64_t tag = 0x1122334455667788ull;
    struct pdr_rdma_plan_limits lim = {0};

    /* One segment each side. */
    struct pdr_rdma_seg l1[] = {{0x1000, 10, 7}}, r1[] = {{0x9000, 10, 9}};
    CHECK(verify_plan(l1, 1, r1, 1, &lim, tag) == 1);

    /* Odd sizes, boundaries on both sides, small WRs. */
    struct pdr_rdma_seg l[] = {{0x10000, 100, 1}, {0x20003, 7, 2}, {0x30001, 300, 3}, {0x40000, 1, 4}};
    struct pdr_rdma_seg r[] = {{0xA0000, 50, 11}, {0xB0005, 357, 12}, {0xC0000, 1, 13}};
    for (uint32_t maxb = 1; maxb <= 512; maxb = maxb * 3 + 1)
        for (uint32_t bw = 1; bw <= 8; bw++)
            for (uint32_t nqp = 1; nqp <= 4; nqp++) {
                struct pdr_rdma_plan_limits x = {maxb, bw, nqp};
                verify_plan(l, 4, r, 3, &x, tag);
                verify_plan(r, 3, l, 4, &x, tag);
            }
    /* Known count: boundaries {50,100,107,407,408} on the local side ∪ {50,407,408}; max 64 →
     * [0,50) 1, [50,100) 1, [100,107) 1, [107,407) 5, [407,408) 1 = 9. */
    struct pdr_rdma_plan_limits x64 = {64, 4, 2};
    CHECK(verify_plan(l, 4, r, 3, &x64, tag) == 9);

    /* Big room, default limits: 3 GiB + 5 bytes in one local segment, two remote. */
    struct pdr_rdma_seg bl[] = {{1ull << 40, (3ull << 30) + 5, 1}};
    struct pdr_rdma_seg br[] = {{1ull << 41, 1ull << 30, 2}, {1ull << 42, (2ull << 30) + 5, 3}};
    struct pdr_rdma_plan_limits d2 = {0, 0, 2};
    CHECK(verify_plan(bl, 1, br, 2, &d2, tag) == 3073);

    /* Errors. */
    size_t n;
    uint32_t nb;
    struct pdr_rdma_seg r9[] = {{0x9000, 9, 9}};
    CHECK(pdr__rdma_plan(l1, 1, r9, 1, &lim, tag, NULL, 0, &n, &nb) == PDR_ESIZE);
    CHECK(pdr__rdma_plan(l1, 0, r1, 1, &lim, tag, NULL, 0, &n, &nb) == PDR_EINVAL);
    CHECK(pdr__rdma_plan(NULL, 1, r1, 1, &lim, tag, NULL, 0, &n, &nb) == PDR_EINVAL);
    CHECK(pdr__rdma_plan(l1, 1, r1, 0, &lim, tag, NULL, 0, &n, &nb) == PDR_EINVAL);
    struct pdr_rdma_seg z[] = {{0x1000, 10, 7}, {0x2000, 0, 7}};
    CHECK(pdr__rdma_plan(z, 2, r1, 1, &lim, tag, NULL, 0, &n, &nb) == PDR_EINVAL);
    struct pdr_rdma_seg wrap[] = {{UINT64_MAX - 4, 10, 7}};
    CHECK(pdr__rdma_plan(wrap, 1, r1, 1, &lim, tag, NULL, 0, &n, &nb) == PDR_EINVAL);
    struct pdr_rdma_plan_limits bad1 = {0, 0, PDR_RDMA_MAX_QP + 1}, bad2 = {0, PDR_RDMA_MAX_WR + 1, 0},
                                bad3 = {(1u << 31) + 1, 0, 0},
                                ok3 = {1u << 31, PDR_RDMA_MAX_WR, PDR_RDMA_MAX_QP};
    CHECK(pdr__rdma_plan(l1, 1, r1, 1, &bad1, tag, NULL, 0, &n, &nb) == PDR_EINVAL);
    CHECK(pdr__rdma_plan(l1, 1, r1, 1, &bad2, tag, NULL, 0, &n, &nb) == PDR_EINVAL);
    CHECK(pdr__rdma_plan(l1, 1, r1, 1, &bad3, tag, NULL, 0, &n, &nb) == PDR_EINVAL);
    CHECK(pdr__rdma_plan(l1, 1, r1, 1, &ok3, tag, NULL, 0, &n, &nb) == 0 && n == 2 && nb == 1);
    CHECK(pdr__rdma_plan(l1, 1, r1, 1, NULL, tag, NULL, 0, &n, &nb) == 0 && n == 2);
    /* WRs of 2^31 bytes: an 8 GiB segment is 4 WRs. */
    struct pdr_rdma_seg hl[] = {{1ull << 44, 8ull << 30, 1}}, hr[] = {{1ull << 45, 8ull << 30, 1}};
    CHECK(pdr__rdma_plan(hl, 1, hr, 1, &ok3, tag, NULL, 0, &n, &nb) == 0 && n == 5);
    /* The plan ceiling: PDR_RDMA_MAX_PLAN_WRS entries (data WRs + the IMM) is the most. */
    struct pdr_rdma_plan_limits one = {1, 0, 0};
    struct pdr_rdma_seg cl[] = {{0x1000, PDR_RDMA_MAX_PLAN_WRS, 1}},
                        cr[] = {{0x1000, PDR_RDMA_MAX_PLAN_WRS, 1}};
    CHECK(pdr__rdma_plan(cl, 1, cr, 1, &one, tag, NULL, 0, &n, &nb) == PDR_ETOOBIG);
    cl[0].len = cr[0].len = PDR_RDMA_MAX_PLAN_WRS - 1;
    CHECK(pdr__rdma_plan(cl, 1, cr, 1, &one, tag, NULL, 0, &n, &nb) == 0 && n == PDR_RDMA_MAX_PLAN_WRS);
}

/* ------------------------------------------------------------------------------------------------- */

static char root[64];

static void mkpath(const char *rel)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    for (char *s = p + strlen(root) + 1; *s; s++) {
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    }
    mkdir(p, 0755);
}

static void write_file(const char *rel, const char *text)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f != NULL) {
        fputs(text, f);
        fclose(f);
    }
}

static void link_at(const char *target, const char *rel)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    CHECK(symlink(target, p) == 0);
}

/* A PCI device at devices/<path>, its numa_node (NULL: no file) and its bus/pci/devices link. */
static void pci_dev(const char *path, const char *numa)
{
    char rel[512], tgt[512];
    snprintf(rel, sizeof(rel), "devices/%s", path);
    mkpath(rel);
    if (numa != NULL) {
        snprintf(rel, sizeof(rel), "devices/%s/numa_node", path);
        write_file(rel, numa);
    }
    const char *bdf = strrchr(path, '/') + 1;
    snprintf(rel, sizeof(rel), "bus/pci/devices/%s", bdf);
    snprintf(tgt, sizeof(tgt), "../../../devices/%s", path);
    link_at(tgt, rel);
}

/* As real sysfs: class/infiniband/<name> → ../../devices/<pci path>/infiniband/<name>, whose device
 * link points back up to the PCI function. */
static void ib_dev(const char *name, const char *path, const char *numa)
{
    char rel[512], tgt[512];
    pci_dev(path, numa);
    snprintf(rel, sizeof(rel), "devices/%s/infiniband/%s", path, name);
    mkpath(rel);
    snprintf(rel, sizeof(rel), "devices/%s/infiniband/%s/device", path, name);
    snprintf(tgt, sizeof(tgt), "../../../%s", strrchr(path, '/') + 1);
    link_at(tgt, rel);
    snprintf(rel, sizeof(rel), "class/infiniband/%s", name);
    snprintf(tgt, sizeof(tgt), "../../devices/%s/infiniband/%s", path, name);
    link_at(tgt, rel);
}

static void expect_pick(const char *gpu, const char *want)
{
    char name[32] = "";
    int rc = pdr__rdma_pick_nic(root, gpu, name, sizeof(name));
    if (rc != 0 || strcmp(name, want) != 0)
        fprintf(stderr, "GPU %s: picked %s (rc %d), want %s\n", gpu ? gpu : "(none)", name, rc, want);
    CHECK(rc == 0 && strcmp(name, want) == 0);
}

static int rm_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    return remove(path);
}

static void rm_rf(const char *dir)
{
    CHECK(nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0);
}

static void test_pick_nic(void)
{
    snprintf(root, sizeof(root), "/tmp/pdr-rdma-sysfs-XXXXXX");
    CHECK(mkdtemp(root) != NULL);
    char name[32];
    /* Nothing yet. */
    CHECK(pdr__rdma_pick_nic(root, NULL, name, sizeof(name)) == PDR_ENOTSUP);
    mkpath("class/infiniband");
    mkpath("bus/pci/devices");
    CHECK(pdr__rdma_pick_nic(root, NULL, name, sizeof(name)) == PDR_ENOTSUP);

    /* Root complex 0000:00 (NUMA 1): root port 00:01.0 → switch 01:00.0 → downstream ports 02:00.0
     * (GPU A) and 02:04.0 (mlx5_1); root port 00:02.0 → mlx5_2; root port 00:03.0 → GPU B.
     * Root complex 0000:80 (NUMA 0): mlx5_0. Root complex 0000:40 (NUMA 1): GPU C alone.
     * Root complex 0000:c0 (NUMA 0): GPU D alone. Root complex 0000:e0, no numa_node: GPU E. */
    ib_dev("mlx5_0", "pci0000:80/0000:80:01.0/0000:81:00.0", "0\n");
    ib_dev("mlx5_1", "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:04.0/0000:04:00.0", "1\n");
    ib_dev("mlx5_2", "pci0000:00/0000:00:02.0/0000:05:00.0", "1\n");
    pci_dev("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0", "1\n");
    pci_dev("pci0000:00/0000:00:03.0/0000:06:00.0", "0\n");
    pci_dev("pci0000:40/0000:40:01.0/0000:41:00.0", "1\n");
    pci_dev("pci0000:c0/0000:c0:01.0/0000:c1:00.0", "0\n");
    pci_dev("pci0000:e0/0000:e0:01.0/0000:e1:00.0", NULL);

    expect_pick("0000:03:00.0", "mlx5_1");     /* same PCIe switch beats same root complex (mlx5_2) */
    expect_pick("00000000:03:00.0", "mlx5_1"); /* NVML-style 8-digit domain */
    expect_pick("0000:06:00.0", "mlx5_1");     /* same root complex beats same NUMA (mlx5_0); tie → name */
    expect_pick("0000:41:00.0", "mlx5_1");     /* no shared bridge: same NUMA (1) beats name order */
    expect_pick("0000:C1:00.0", "mlx5_0");     /* upper-case hex; NUMA 0 */
    expect_pick("0000:e1:00.0", "mlx5_0");     /* unknown NUMA: name order */
    expect_pick(NULL, "mlx5_0");               /* no GPU: name order */
    expect_pick("0000:99:00.0", "mlx5_0");     /* GPU not in sysfs: name order */
    expect_pick("garbage", "mlx5_0");          /* not a bus id: name order */

    /* A NIC directory without a device link (virtual): ranked last among equals, still pickable. */
    mkpath("class/infiniband/aaa_virt");
    expect_pick("0000:03:00.0", "mlx5_1");
    expect_pick(NULL, "aaa_virt");

    CHECK(pdr__rdma_pick_nic(root, "0000:03:00.0", name, 6) == PDR_ETOOBIG);
    CHECK(pdr__rdma_pick_nic(root, "0000:03:00.0", name, 7) == 0 && strcmp(name, "mlx5_1") == 0);
    CHECK(pdr__rdma_pick_nic(NULL, NULL, name, sizeof(name)) == PDR_EINVAL);
    CHECK(pdr__rdma_pick_nic(root, NULL, NULL, 8) == PDR_EINVAL);
    rm_rf(root);
}

static const pdr_test_case_t cases[] = {
    {"ep_desc", test_ep_desc, 60}, {"mem_desc", test_mem_desc, 60}, {"state_machine", test_state_machine, 60},
    {"plan", test_plan, 60},       {"pick_nic", test_pick_nic, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
