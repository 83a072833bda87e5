/*
 * pdxfer-bench's initiator (--mode initiator): T worker threads that each keep B pulls in flight, verify
 * every room that lands (full, sampled, or not at all; on the device for device memory), and the report:
 * throughput, latency percentiles, CPU, and the target's STATS. The design is in pdxfer_bench.c's header
 * comment.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_cuda.h"
#include "err.h"
#include "pdxfer_internal.h"
#include "transport.h"

struct initiator;

struct worker {
    struct initiator *in;
    unsigned tid;
    pthread_t thread;
    struct queue q;
    uint64_t transfers, failures, verify_errors, bad_words, bytes;
    double verify_s;
    uint32_t *lat; /* microseconds, capped at UINT32_MAX */
    size_t nlat, seen;
    uint64_t rng;
    const char *backend_used;
    void *stream, *scratch; /* device memory, --verify full: the compare kernel's stream and result */
};

struct initiator {
    const struct args *a;
    pdr_xfer_engine_t *eng;
    char host[256];
    int port;
    unsigned session;
    unsigned char *dst; /* threads * batch slots of block bytes */
    double end;
    struct worker *w;
};

static unsigned sample_count(const struct args *a)
{
    return pdx__is_cuda(a) ? 3 : 17;
}

static unsigned char *slot_of(struct worker *w, uint64_t seq)
{
    const struct args *a = w->in->a;
    size_t slot = (size_t)w->tid * (size_t)a->batch + (size_t)(seq % (uint64_t)a->batch);
    return w->in->dst + slot * a->block;
}

/* The block room seq carries (the target holds batch + 1 of them). */
static uint64_t block_of(const struct args *a, uint64_t seq)
{
    return seq % ((uint64_t)a->batch + 1);
}

/* One word of a destination slot, read back to the host. */
static uint64_t read_word(const struct args *a, const unsigned char *p)
{
    uint64_t v = 0;
    if (pdx__is_cuda(a)) {
        if (pdr__cuda_copy_sync(&v, p, 8) != 0)
            pdx__die("verify read-back", PDR_EIO);
    } else {
        memcpy(&v, p, 8);
    }
    return v;
}

/* What a wrong word holds: the pattern this slot held before (the room did not write it), zeros (no room
 * ever wrote it) or something else. */
static const char *mismatch_kind(const struct args *a, uint64_t seq, uint64_t word, uint64_t v)
{
    if (seq >= (uint64_t)a->batch && v == pdx__pattern_word(block_of(a, seq - (uint64_t)a->batch), word))
        return "the slot's previous room";
    return v == 0 ? "zero, never written" : "neither this room's nor the previous room's";
}

/* Compares the slot of room seq with its block. Returns the number of wrong words; *first is the index of
 * the first one. */
static uint64_t verify(struct worker *w, uint64_t seq, uint64_t *first)
{
    const struct args *a = w->in->a;
    const unsigned char *p = slot_of(w, seq);
    uint64_t block = block_of(a, seq), bad = 0;
    *first = UINT64_MAX;
    if (a->verify == VERIFY_FULL && pdx__is_cuda(a)) {
        struct pdr_cuda_check ck;
        int rc = pdr__cuda_pattern_check(p, a->block, block + 1, 0, w->scratch, w->stream, &ck);
        if (rc != 0) {
            fprintf(stderr, "pdxfer-bench: compare kernel on device %d: %s (%s)\n", a->device,
                    pdr_strerror(rc), pdr__cuda_last_error());
            exit(2);
        }
        *first = ck.first_bad;
        return ck.mismatches;
    }
    if (a->verify == VERIFY_FULL) {
        for (size_t off = 0; off < a->block; off += 8) {
            uint64_t v;
            memcpy(&v, p + off, 8);
            if (v != pdx__pattern_word(block, off / 8) && bad++ == 0)
                *first = off / 8;
        }
        return bad;
    }
    unsigned n = a->verify == VERIFY_SAMPLE ? sample_count(a) : 0;
    for (unsigned i = 0; i < n; i++) {
        size_t off = pdx__sample_offset(a->block, i, n);
        if (read_word(a, p + off) != pdx__pattern_word(block, off / 8) && bad++ == 0)
            *first = off / 8;
    }
    return bad;
}

static int post_pull(struct worker *w, uint64_t seq)
{
    struct initiator *in = w->in;
    pdr_xfer_seg_t seg = {.addr = slot_of(w, seq), .len = in->a->block};
    return pdr_xfer_pull_ex(in->eng, in->host, in->port, pdx__room_id(in->session, w->tid, seq), &seg, 1,
                            in->a->timeout_ms, pdx__on_info, &w->q);
}

static void record_latency(struct worker *w, uint64_t usec)
{
    uint32_t v = usec > UINT32_MAX ? UINT32_MAX : (uint32_t)usec;
    w->seen++;
    if (w->nlat < MAX_SAMPLES) {
        w->lat[w->nlat++] = v;
        return;
    }
    w->rng = w->rng * 6364136223846793005ull + 1442695040888963407ull; /* reservoir sampling */
    uint64_t j = (w->rng >> 11) % w->seen;
    if (j < MAX_SAMPLES)
        w->lat[j] = v;
}

static void check_room(struct worker *w, uint64_t seq)
{
    const struct args *a = w->in->a;
    double t0 = pdx__now_s();
    uint64_t first = UINT64_MAX, bad = verify(w, seq, &first);
    if (bad > 0) {
        w->bad_words += bad;
        if (w->verify_errors++ < 5) {
            uint64_t v = read_word(a, slot_of(w, seq) + first * 8);
            fprintf(stderr,
                    "initiator: room %u/%llu (block %llu): %llu wrong words of %zu; the first, word %llu, "
                    "holds %016llx, expected %016llx (%s)\n",
                    w->tid, (unsigned long long)seq, (unsigned long long)block_of(a, seq),
                    (unsigned long long)bad, a->block / 8, (unsigned long long)first, (unsigned long long)v,
                    (unsigned long long)pdx__pattern_word(block_of(a, seq), first),
                    mismatch_kind(a, seq, first, v));
        }
    }
    w->verify_s += pdx__now_s() - t0;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    const struct args *a = w->in->a;
    if (pdx__is_cuda(a) && pdr__cuda_bind(a->device) != 0)
        pdx__die("worker bind", PDR_EIO);
    if (pdx__is_cuda(a) && a->verify == VERIFY_FULL) {
        int rc = pdr__cuda_stream_create(&w->stream);
        if (rc == 0)
            rc = pdr__cuda_mem_alloc(16, &w->scratch);
        if (rc != 0)
            pdx__die("compare kernel stream", rc);
    }
    size_t inflight = 0;
    /* Posts seq, or the next seqs of this slot when posting fails (the target moves on after its timeout). */
    for (long k = 0; k < a->batch; k++) {
        for (uint64_t seq = (uint64_t)k; pdx__now_s() < w->in->end; seq += (uint64_t)a->batch) {
            if (post_pull(w, seq) == 0) {
                inflight++;
                break;
            }
            w->failures++;
            usleep(1000);
        }
    }
    while (inflight > 0) {
        struct done d;
        if (pdx__queue_get(&w->q, &d, 1000) != 0)
            continue;
        inflight--;
        uint64_t seq = d.room & 0xffffffffull;
        if (d.status == 0) {
            record_latency(w, d.usec);
            w->transfers++;
            w->bytes += d.bytes;
            if (w->backend_used == NULL)
                w->backend_used = d.backend;
            check_room(w, seq);
        } else {
            if (w->failures++ < 5)
                fprintf(stderr, "initiator: room %u/%llu failed: %s\n", w->tid, (unsigned long long)seq,
                        pdr_errname(d.status));
            usleep(10000); /* a failing path fails fast: do not turn the run into a busy loop */
        }
        for (seq += (uint64_t)a->batch; pdx__now_s() < w->in->end; seq += (uint64_t)a->batch) {
            if (post_pull(w, seq) == 0) {
                inflight++;
                break;
            }
            w->failures++;
            usleep(1000);
        }
    }
    pdr__cuda_mem_free(w->scratch);
    pdr__cuda_stream_destroy(w->stream);
    return NULL;
}

int pdx__run_initiator(const struct args *a)
{
    struct initiator in;
    memset(&in, 0, sizeof(in));
    in.a = a;
    if (a->peer == NULL || pdx__split_hostport(a->peer, in.host, sizeof(in.host), &in.port) != 0) {
        fprintf(stderr, "pdxfer-bench: --mode initiator needs --peer HOST:PORT\n");
        return 2;
    }
    if (a->block < 8 || a->block % 8 != 0) {
        fprintf(stderr, "pdxfer-bench: --block-size must be a positive multiple of 8\n");
        return 2;
    }
    if ((unsigned long long)a->block * (unsigned long long)a->batch * (unsigned long long)a->threads >
        (1ull << 42)) {
        fprintf(stderr, "pdxfer-bench: block-size x batch x threads is too large\n");
        return 2;
    }
    pdx__cuda_setup(a);
    in.eng = pdx__make_engine(a, NULL, 0);
    int rc;
    size_t total = a->block * (size_t)a->batch * (size_t)a->threads;
    in.dst = pdx__mem_alloc(a, total);
    /* Zeros before the first pull (host memory: mem_alloc's), so that no earlier process's pattern can
     * pass for a room's bytes. pdr__cuda_memset returns once they are in place. */
    if (pdx__is_cuda(a) && (rc = pdr__cuda_memset(in.dst, 0, total)) != 0)
        pdx__die("clearing the destination", rc);
    rc =
        pdr_xfer_mem_register(in.eng, in.dst, total, pdx__is_cuda(a) ? PDR_XFER_MEM_CUDA : PDR_XFER_MEM_HOST);
    if (rc != 0)
        fprintf(stderr, "initiator: mem_register: %s\n", pdr_strerror(rc));

    int cfd = pdx__tcp_socket(in.host, in.port + 1, 0);
    if (cfd < 0) {
        fprintf(stderr, "pdxfer-bench: cannot reach the target's control port %s:%d: %s\n", in.host,
                in.port + 1, strerror(errno));
        return 2;
    }
    char line[CTL_LINE];
    snprintf(line, sizeof(line), "PDXFER 2 threads=%d batch=%ld block=%zu parts=%d compute_us=%ld\n",
             a->threads, a->batch, a->block, a->parts, a->compute_us);
    unsigned long long sess = 0, nblocks = 0;
    /* The target allocates and fills its buffer before answering: allow for a large one. */
    if (pdx__ctl_send(cfd, line) != 0 || pdx__ctl_recv(cfd, line, sizeof(line), 300000, 0) != 0 ||
        strncmp(line, "OK ", 3) != 0 || pdx__ctl_field(line, "session", &sess) != 0 ||
        pdx__ctl_field(line, "blocks", &nblocks) != 0 || nblocks != (unsigned long long)a->batch + 1) {
        fprintf(stderr, "pdxfer-bench: the target refused the session (an older pdxfer-bench?)\n");
        return 2;
    }
    in.session = (unsigned)sess;

    in.w = calloc((size_t)a->threads, sizeof(*in.w));
    if (in.w == NULL)
        pdx__die("workers", PDR_ENOMEM);
    double c0 = pdx__cpu_s(), t0 = pdx__now_s();
    in.end = t0 + a->duration;
    for (int t = 0; t < a->threads; t++) {
        struct worker *w = &in.w[t];
        w->in = &in;
        w->tid = (unsigned)t;
        w->rng = 0x853c49e6748fea9bull + (uint64_t)t;
        w->lat = malloc(sizeof(uint32_t) * MAX_SAMPLES);
        if (w->lat == NULL)
            pdx__die("latency samples", PDR_ENOMEM);
        pdx__queue_init(&w->q, (size_t)a->batch);
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
            pdx__die("worker thread", PDR_ENOMEM);
    }
    for (int t = 0; t < a->threads; t++)
        pthread_join(in.w[t].thread, NULL);
    double el = pdx__now_s() - t0, cpu = pdx__cpu_s() - c0;

    unsigned long long tt = 0, tf = 0, tsp = 0, tcpu = 0, tp50 = 0, tp99 = 0;
    int have_target =
        pdx__ctl_send(cfd, "BYE\n") == 0 && pdx__ctl_recv(cfd, line, sizeof(line), 60000, 0) == 0 &&
        strncmp(line, "STATS ", 6) == 0 && pdx__ctl_field(line, "transfers", &tt) == 0 &&
        pdx__ctl_field(line, "failures", &tf) == 0 && pdx__ctl_field(line, "staging_peak", &tsp) == 0 &&
        pdx__ctl_field(line, "cpu_ms", &tcpu) == 0;
    if (have_target &&
        (pdx__ctl_field(line, "tail_p50_us", &tp50) != 0 || pdx__ctl_field(line, "tail_p99_us", &tp99) != 0))
        tp50 = tp99 = 0;
    close(cfd);

    uint64_t transfers = 0, failures = 0, verr = 0, bad_words = 0, bytes = 0;
    double verify_s = 0;
    size_t nlat = 0;
    const char *used = NULL;
    for (int t = 0; t < a->threads; t++) {
        transfers += in.w[t].transfers;
        failures += in.w[t].failures;
        verr += in.w[t].verify_errors;
        bad_words += in.w[t].bad_words;
        verify_s += in.w[t].verify_s;
        bytes += in.w[t].bytes;
        nlat += in.w[t].nlat;
        if (used == NULL)
            used = in.w[t].backend_used;
    }
    uint32_t *all = malloc(sizeof(uint32_t) * (nlat ? nlat : 1));
    if (all == NULL)
        pdx__die("latency samples", PDR_ENOMEM);
    size_t n = 0;
    for (int t = 0; t < a->threads; t++) {
        memcpy(all + n, in.w[t].lat, sizeof(uint32_t) * in.w[t].nlat);
        n += in.w[t].nlat;
    }
    qsort(all, n, sizeof(uint32_t), pdx__cmp_u32);
    double p50 = n ? all[(n - 1) / 2] : 0, p99 = n ? all[(size_t)((double)(n - 1) * 0.99)] : 0;
    double gbs = el > 0 ? (double)bytes / el / 1e9 : 0;
    pdr_xfer_stats_t st;
    pdr_xfer_get_stats(in.eng, &st);

    printf("initiator: backend=%s (used %s) mem=%s block=%zu batch=%ld threads=%d conns=%d duration=%.1fs\n",
           a->backend, used ? used : "none", a->mem, a->block, a->batch, a->threads, a->conns, el);
    printf("  transfers %llu  failures %llu  verify errors %llu (verify %s: %llu wrong words, %.2f s)\n",
           (unsigned long long)transfers, (unsigned long long)failures, (unsigned long long)verr,
           pdx__verify_names[a->verify], (unsigned long long)bad_words, verify_s);
    printf("  throughput %.3f GB/s  latency p50 %.0f us  p99 %.0f us\n", gbs, p50, p99);
    if (a->parts > 0 || a->compute_us > 0)
        printf("  parts %d, compute %ld us per room: target tail after compute p50 %llu us, p99 %llu us\n",
               a->parts, a->compute_us, tp50, tp99);
    printf("  cpu %.2f s (%.2f cores)", cpu, el > 0 ? cpu / el : 0);
    if (have_target)
        printf(", target cpu %.2f s", (double)tcpu / 1000);
    printf("\n  staging peak: initiator %llu bytes", (unsigned long long)st.staging_peak_bytes);
    if (have_target)
        printf(", target %llu bytes (target: %llu transfers, %llu failures)\n", tsp, tt, tf);
    else
        printf(", target unknown (no STATS reply)\n");
    /* A run that moved nothing, lost a room or a byte on either side, or cannot tell, failed. */
    int ok = transfers > 0 && failures == 0 && verr == 0 && have_target && tf == 0;
    printf("  result: %s\n", ok ? "ok" : "FAILED");
    if (a->json)
        printf("{\"mode\":\"initiator\",\"backend\":\"%s\",\"backend_used\":\"%s\",\"mem\":\"%s\","
               "\"block_size\":%zu,\"batch\":%ld,\"threads\":%d,\"conns\":%d,\"duration_s\":%.3f,"
               "\"bytes\":%llu,\"gb_per_s\":%.4f,\"p50_us\":%.0f,\"p99_us\":%.0f,\"transfers\":%llu,"
               "\"failures\":%llu,\"verify\":\"%s\",\"verify_errors\":%llu,\"verify_bad_words\":%llu,"
               "\"verify_s\":%.3f,\"cpu_s\":%.3f,\"staging_peak_bytes\":%llu,"
               "\"target_staging_peak_bytes\":%lld,\"target_transfers\":%lld,\"target_failures\":%lld,"
               "\"target_cpu_s\":%.3f,\"parts\":%d,\"compute_us\":%ld,\"tail_p50_us\":%llu,"
               "\"tail_p99_us\":%llu,\"ok\":%s}\n",
               a->backend, used ? used : "none", a->mem, a->block, a->batch, a->threads, a->conns, el,
               (unsigned long long)bytes, gbs, p50, p99, (unsigned long long)transfers,
               (unsigned long long)failures, pdx__verify_names[a->verify], (unsigned long long)verr,
               (unsigned long long)bad_words, verify_s, cpu, (unsigned long long)st.staging_peak_bytes,
               have_target ? (long long)tsp : -1LL, have_target ? (long long)tt : -1LL,
               have_target ? (long long)tf : -1LL, have_target ? (double)tcpu / 1000 : -1.0, a->parts,
               a->compute_us, tp50, tp99, ok ? "true" : "false");
    fflush(stdout);

    pdr_xfer_engine_destroy(in.eng);
    for (int t = 0; t < a->threads; t++) {
        free(in.w[t].lat);
        pdx__queue_fini(&in.w[t].q);
    }
    free(in.w);
    free(all);
    pdx__mem_free(a, in.dst);
    return ok ? 0 : 1;
}
