/*
 * pdxfer-bench's target (--mode target): its engine listens on PORT and a control socket on PORT+1; per
 * session (one initiator's hello) it allocates and fills the blocks, offers (pushes) every worker's rooms
 * from an offer thread, optionally streamed in parts with simulated compute (--parts, --compute-us), and
 * answers BYE with its STATS. The design is in pdxfer_bench.c's header comment.
 */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "err.h"
#include "pdxfer_internal.h"
#include "transport.h"

struct target_session {
    pdr_xfer_engine_t *eng;
    struct queue q;
    unsigned session, threads;
    long batch, nblocks; /* nblocks = batch + 1 blocks in buf */
    size_t block;
    unsigned char *buf;
    uint64_t *pending; /* [threads * batch]: room offered in that slot, or UINT64_MAX */
    volatile int stop;
    uint64_t transfers, failures, bytes;
    /* Streamed offers and simulated compute (--parts, --compute-us): one stream per slot. */
    int parts;
    double compute_s;
    struct stream {
        uint64_t room; /* UINT64_MAX: nothing left to publish */
        pdr_xfer_seg_t seg;
        int next;          /* the next part to publish (the whole push when parts is 0) */
        double due, t_end; /* when it is due; when the compute ended (0: not yet) */
    } * st;
    uint32_t *tail; /* µs from the end of compute to completion, successful rooms */
    size_t ntail;
};

/* Publishes what is due of slot i's stream at time now (everything when now is 0). 0, or the code of a
 * refused call (the room's callback will not run then: the caller counts it failed). */
static int stream_step(struct target_session *s, size_t i, double now)
{
    struct stream *st = &s->st[i];
    int n = s->parts > 0 ? s->parts : 1;
    while (st->room != UINT64_MAX && (now == 0 || st->due <= now)) {
        int rc;
        if (s->parts == 0) {
            rc = pdr_xfer_push_ex(s->eng, st->room, &st->seg, 1, 0, pdx__on_info, &s->q);
        } else {
            size_t lo = st->seg.len * (size_t)st->next / (size_t)n,
                   hi = st->seg.len * (size_t)(st->next + 1) / (size_t)n;
            pdr_xfer_seg_t part = {(unsigned char *)st->seg.addr + lo, hi - lo};
            rc = hi > lo ? pdr_xfer_push_part(s->eng, st->room, lo, &part, 1) : 0;
        }
        st->next++;
        st->due += s->compute_s / n;
        if (st->next == n) {
            st->t_end = pdx__now_s();
            st->room = UINT64_MAX;
        }
        if (rc != 0 && (s->parts == 0 || rc != PDR_ENOROOM)) {
            st->room = UINT64_MAX;
            return rc;
        }
    }
    return 0;
}

/* Runs every stream that is due; returns the ms until the next one (at most 100). */
static int streams_run(struct target_session *s, double now, size_t *refused)
{
    double next = now + 0.1;
    for (size_t i = 0; s->st != NULL && i < (size_t)s->threads * (size_t)s->batch; i++) {
        if (s->st[i].room == UINT64_MAX)
            continue;
        if (stream_step(s, i, s->stop ? 0 : now) != 0) {
            s->failures++;
            s->pending[i] = UINT64_MAX;
            (*refused)++;
        }
        if (s->st[i].room != UINT64_MAX && s->st[i].due < next)
            next = s->st[i].due;
    }
    double ms = (next - now) * 1000;
    return ms <= 0 ? 0 : (int)ms;
}

static int offer_one(struct target_session *s, unsigned tid, uint64_t seq)
{
    size_t slot = (size_t)tid * (size_t)s->batch + (size_t)(seq % (uint64_t)s->batch);
    pdr_xfer_seg_t seg = {.addr = s->buf + (size_t)(seq % (uint64_t)s->nblocks) * s->block, .len = s->block};
    uint64_t room = pdx__room_id(s->session, tid, seq);
    s->pending[slot] = room;
    int rc = 0;
    if (s->st != NULL) {
        /* Simulated compute: the stream publishes the room (in parts, or whole) as it becomes due. */
        struct stream *st = &s->st[slot];
        double now = pdx__now_s();
        if (s->parts > 0)
            rc = pdr_xfer_push_open(s->eng, room, seg.len, 0, pdx__on_info, &s->q);
        if (rc == 0) {
            st->room = room;
            st->seg = seg;
            st->next = 0;
            st->t_end = 0;
            st->due = now + s->compute_s / (s->parts > 0 ? s->parts : 1);
            rc = stream_step(s, slot, now);
        }
    } else {
        rc = pdr_xfer_push_ex(s->eng, room, &seg, 1, 0, pdx__on_info, &s->q);
    }
    if (rc != 0) {
        s->pending[slot] = UINT64_MAX;
        s->failures++;
        if (s->failures <= 5)
            fprintf(stderr, "target: push of room %u/%llu refused: %s\n", tid, (unsigned long long)seq,
                    pdr_errname(rc));
    }
    return rc;
}

/* Offers seq of worker tid; when the engine refuses it outright, the next rooms of the same slot (the
 * initiator moves on too once its pull of a never-offered room times out). 0 when one is in flight. */
static int offer(struct target_session *s, unsigned tid, uint64_t seq)
{
    for (; !s->stop && seq <= 0xffffffffull; seq += (uint64_t)s->batch) {
        if (offer_one(s, tid, seq) == 0)
            return 0;
        usleep(1000);
    }
    return -1;
}

static void *target_offer_main(void *arg)
{
    struct target_session *s = arg;
    size_t inflight = 0;
    for (unsigned t = 0; t < s->threads; t++)
        for (long k = 0; k < s->batch; k++)
            if (offer(s, t, (uint64_t)k) == 0)
                inflight++;
    int canceled = 0;
    while (inflight > 0) {
        size_t refused = 0;
        int wait_ms = streams_run(s, pdx__now_s(), &refused); /* at stop: everything left is published now */
        inflight -= refused;
        if (inflight == 0)
            break;
        if (s->stop && !canceled) {
            for (size_t i = 0; i < (size_t)s->threads * (size_t)s->batch; i++)
                if (s->pending[i] != UINT64_MAX)
                    (void)pdr_xfer_cancel(s->eng, s->pending[i]);
            canceled = 1;
        }
        struct done d;
        if (pdx__queue_get(&s->q, &d, s->st != NULL ? wait_ms : 100) != 0)
            continue;
        inflight--;
        unsigned tid = (unsigned)((d.room >> 32) & 0xffff);
        uint64_t seq = d.room & 0xffffffffull;
        size_t slot = (size_t)tid * (size_t)s->batch + (size_t)(seq % (uint64_t)s->batch);
        s->pending[slot] = UINT64_MAX;
        if (s->st != NULL && s->st[slot].room == d.room)
            s->st[slot].room = UINT64_MAX; /* failed before its last part */
        if (d.status == 0) {
            s->transfers++;
            s->bytes += d.bytes;
            if (s->st != NULL && s->st[slot].t_end > 0 && s->ntail < MAX_SAMPLES) {
                double us = (pdx__now_s() - s->st[slot].t_end) * 1e6;
                s->tail[s->ntail++] = us < 0 ? 0 : (uint32_t)us;
            }
        } else if (!(s->stop && (d.status == PDR_ECANCELED || d.status == PDR_ECLOSED))) {
            s->failures++;
            if (s->failures <= 5)
                fprintf(stderr, "target: room %u/%llu failed: %s\n", tid, (unsigned long long)seq,
                        pdr_errname(d.status));
            usleep(1000); /* a failing path fails fast: do not turn the run into a busy loop */
        }
        /* 2^32 rooms per worker and session: far beyond any run's length. */
        if (!s->stop && seq + (uint64_t)s->batch <= 0xffffffffull &&
            offer(s, tid, seq + (uint64_t)s->batch) == 0)
            inflight++;
    }
    return NULL;
}

int pdx__run_target(const struct args *a)
{
    char host[256];
    int port;
    if (a->listen == NULL || pdx__split_hostport(a->listen, host, sizeof(host), &port) != 0) {
        fprintf(stderr,
                "pdxfer-bench: --mode target needs --listen HOST:PORT (PORT+1 is the control port)\n");
        return 2;
    }
    pdx__cuda_setup(a);
    pdr_xfer_engine_t *eng = pdx__make_engine(a, host, port);
    int lfd = pdx__tcp_socket(host, port + 1, 1);
    if (lfd < 0) {
        fprintf(stderr, "pdxfer-bench: cannot listen on %s:%d (control): %s\n", host, port + 1,
                strerror(errno));
        return 2;
    }
    printf("target: data %s:%d control %s:%d backend=%s mem=%s device=%d\n", host, pdr_xfer_listen_port(eng),
           host, port + 1, a->backend, a->mem, a->device);
    fflush(stdout);

    unsigned char *buf = NULL;
    size_t buflen = 0;
    unsigned session = 0;
    uint64_t tot_transfers = 0, tot_failures = 0;
    while (!pdx__stop_flag) {
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0)
            continue;
        int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (cfd < 0)
            continue;
        char line[CTL_LINE];
        unsigned long long th = 0, ba = 0, bl = 0, np = 0, cus = 0;
        if (pdx__ctl_recv(cfd, line, sizeof(line), 5000, 1) != 0 || strncmp(line, "PDXFER 2 ", 9) != 0 ||
            pdx__ctl_field(line, "threads", &th) != 0 || pdx__ctl_field(line, "batch", &ba) != 0 ||
            pdx__ctl_field(line, "block", &bl) != 0 || th < 1 || th > 4096 || ba < 1 || ba > 65536 ||
            bl < 8 || bl % 8 != 0 || bl > (1ull << 40) / (ba + 1)) {
            (void)pdx__ctl_send(cfd, "ERR bad hello (this target speaks PDXFER 2)\n");
            close(cfd);
            continue;
        }
        /* Optional: streamed offers and simulated compute. */
        if (pdx__ctl_field(line, "parts", &np) != 0 || np > 4096)
            np = 0;
        if (pdx__ctl_field(line, "compute_us", &cus) != 0 || cus > 100000000ull)
            cus = 0;
        unsigned long long nb = ba + 1;
        size_t need = (size_t)(nb * bl);
        if (need != buflen) {
            if (buf != NULL) {
                pdr_xfer_mem_unregister(eng, buf);
                pdx__mem_free(a, buf);
            }
            buf = pdx__mem_alloc(a, need);
            buflen = need;
            pdx__fill_buffer(a, buf, (size_t)bl, (long)nb);
            int rc = pdr_xfer_mem_register(eng, buf, buflen,
                                           pdx__is_cuda(a) ? PDR_XFER_MEM_CUDA : PDR_XFER_MEM_HOST);
            if (rc != 0)
                fprintf(stderr, "target: mem_register: %s\n", pdr_strerror(rc));
        } else {
            pdx__fill_buffer(a, buf, (size_t)bl, (long)nb);
        }
        session = (session + 1) & 0xffff;
        struct target_session s;
        memset(&s, 0, sizeof(s));
        s.eng = eng;
        s.session = session;
        s.threads = (unsigned)th;
        s.batch = (long)ba;
        s.nblocks = (long)nb;
        s.block = (size_t)bl;
        s.buf = buf;
        s.pending = malloc(sizeof(uint64_t) * th * ba);
        if (s.pending == NULL)
            pdx__die("pending table", PDR_ENOMEM);
        pdx__queue_init(&s.q, (size_t)(th * ba));
        s.parts = (int)np;
        s.compute_s = (double)cus / 1e6;
        if (np > 0 || cus > 0) {
            s.st = malloc(sizeof(*s.st) * th * ba);
            s.tail = malloc(sizeof(uint32_t) * MAX_SAMPLES);
            if (s.st == NULL || s.tail == NULL)
                pdx__die("streams", PDR_ENOMEM);
            for (size_t i = 0; i < th * ba; i++)
                s.st[i].room = UINT64_MAX;
        }
        char ok[64];
        snprintf(ok, sizeof(ok), "OK session=%u blocks=%llu\n", session, nb);
        pthread_t t;
        if (pthread_create(&t, NULL, target_offer_main, &s) != 0)
            pdx__die("offer thread", PDR_ENOMEM);
        (void)pdx__ctl_send(cfd, ok);
        double t0 = pdx__now_s(), c0 = pdx__cpu_s();
        int r;
        do {
            r = pdx__ctl_recv(cfd, line, sizeof(line), -1, 1); /* BYE, EOF or a signal */
        } while (r == 0 && strcmp(line, "BYE") != 0);
        s.stop = 1;
        pthread_join(t, NULL);
        double el = pdx__now_s() - t0, cpu = pdx__cpu_s() - c0;
        pdr_xfer_stats_t st;
        pdr_xfer_get_stats(eng, &st);
        char reply[CTL_LINE];
        if (s.ntail > 0) /* s.tail is NULL without parts or compute time; qsort takes no NULL */
            qsort(s.tail, s.ntail, sizeof(uint32_t), pdx__cmp_u32);
        unsigned long long tp50 = s.ntail ? s.tail[(s.ntail - 1) / 2] : 0,
                           tp99 = s.ntail ? s.tail[(size_t)((double)(s.ntail - 1) * 0.99)] : 0;
        snprintf(reply, sizeof(reply),
                 "STATS transfers=%llu failures=%llu staging_peak=%llu cpu_ms=%llu tail_p50_us=%llu "
                 "tail_p99_us=%llu\n",
                 (unsigned long long)s.transfers, (unsigned long long)s.failures,
                 (unsigned long long)st.staging_peak_bytes, (unsigned long long)(cpu * 1000), tp50, tp99);
        if (s.st != NULL)
            printf("target: session %u: parts %d, compute %.0f us per room: tail after compute p50 %llu us, "
                   "p99 %llu us\n",
                   session, s.parts, s.compute_s * 1e6, tp50, tp99);
        (void)pdx__ctl_send(cfd, reply);
        close(cfd);
        printf("target: session %u: %u threads x %ld rooms of %zu bytes: %llu transfers, %llu failures, "
               "%.3f GB/s, cpu %.2f s, staging peak %llu bytes\n",
               session, s.threads, s.batch, s.block, (unsigned long long)s.transfers,
               (unsigned long long)s.failures, el > 0 ? (double)s.bytes / el / 1e9 : 0.0, cpu,
               (unsigned long long)st.staging_peak_bytes);
        fflush(stdout);
        tot_transfers += s.transfers;
        tot_failures += s.failures;
        pdx__queue_fini(&s.q);
        free(s.pending);
        free(s.st);
        free(s.tail);
    }
    close(lfd);
    pdr_xfer_stats_t st;
    pdr_xfer_get_stats(eng, &st);
    printf("target: exit: %llu transfers, %llu failures, staging peak %llu bytes, cpu %.2f s\n",
           (unsigned long long)tot_transfers, (unsigned long long)tot_failures,
           (unsigned long long)st.staging_peak_bytes, pdx__cpu_s());
    if (a->json)
        printf("{\"mode\":\"target\",\"transfers\":%llu,\"failures\":%llu,\"staging_peak_bytes\":%llu,"
               "\"cpu_s\":%.3f}\n",
               (unsigned long long)tot_transfers, (unsigned long long)tot_failures,
               (unsigned long long)st.staging_peak_bytes, pdx__cpu_s());
    pdr_xfer_engine_destroy(eng);
    if (buf != NULL)
        pdx__mem_free(a, buf);
    return tot_failures == 0 ? 0 : 1;
}
