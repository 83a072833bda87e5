/*
 * pdxfer-bench — the transport benchmark (in the spirit of mooncake's transfer_engine_bench, in our
 * push/pull model). Uses only the public API of transport.h, plus transport/gpu_cuda.h to allocate GPU
 * memory.
 *
 *   pdxfer-bench --mode target --listen HOST:PORT [--backend B] [--mem host|cuda] [--device N] [--json]
 *   pdxfer-bench --mode initiator --peer HOST:PORT --backend tcp|rdma|cuda_ipc|auto --mem host|cuda
 *                --block-size BYTES --batch N --threads N --conns N --duration SECONDS [--json]
 *                [--verify full|sample|off] [--device N] [--staging-chunks N] [--chunk-bytes N]
 *                [--io-threads N] [--timeout-ms N] [--parts N] [--compute-us US]
 *   pdxfer-bench --mode copytest --mem cuda [--device N] [--peer-device M] [--block-size BYTES]
 *                [--duration SECONDS] [--json]
 *
 * Design. The target's engine listens on PORT; a control socket listens on PORT+1. A session:
 *  1. The initiator connects to the control port and sends "PDXFER 2 threads=T batch=B block=S\n". The
 *     target allocates B + 1 blocks of S bytes (host, or device memory on --device), fills block k with
 *     a pattern derived from k (on the device for device memory), waits until the pattern is in place,
 *     registers the buffer, and answers "OK session=N blocks=B+1\n".
 *  2. Room ids are (N << 48) | (t << 32) | seq for worker t in [0, T) and seq = 0, 1, 2, ...; room seq
 *     carries block seq % (B + 1). The target offers (pushes) seq 0..B-1 of every worker at once, and
 *     each time a push completes (successfully or not) it offers seq + B of the same worker. The
 *     initiator's worker t pulls seq 0..B-1 at once, seq into destination slot seq % B, and on each
 *     completion verifies the slot and pulls seq + B. Both sides thus keep T x B rooms in flight and agree
 *     on which rooms exist without any per-room control traffic; a failed room fails on both sides and
 *     both move on. Consecutive rooms of a slot carry different blocks (seq and seq + B differ mod B + 1),
 *     so a byte a room did not write still holds the previous room's pattern and fails verification:
 *     the initiator never writes a destination after setting it to zero once, before the first pull.
 *  3. After --duration seconds the initiator stops posting, waits for its pulls in flight, and sends
 *     "BYE\n". The target cancels the rooms it still offers (T x B), drains their callbacks and answers
 *     "STATS transfers=X failures=Y staging_peak=Z\n", which the initiator reports next to its own numbers.
 *     The target then waits for the next session (a script can run many rounds against one target), and
 *     prints its totals on SIGINT/SIGTERM.
 * Streamed offers (--parts N, --compute-us C, given to the initiator, which passes them in its hello):
 * the target simulates a prefill that computes each room for C µs. With --parts N it opens the room with
 * pdr_xfer_push_open and publishes part k (block bytes [k·S/N, (k+1)·S/N)) at open + (k+1)·C/N, so part k
 * moves while part k+1 is "computed"; with --parts 0 (the whole offer) it posts pdr_xfer_push at open + C.
 * The target then reports the tail after compute: per room, the time from the end of its compute (the
 * last part published, or the whole push posted) to the push's completion, p50 and p99.
 * Reported: GB/s (10^9 bytes/s of successfully pulled bytes over the wall time from the first post to the
 * last completion, verification included), per-transfer latency p50/p99 (the engine's post-to-completion
 * time of successful pulls), CPU seconds of the process (getrusage user+sys over the run), the seconds
 * the workers spent verifying, and pdr_xfer_get_stats().staging_peak_bytes on both sides.
 * Verification (--verify): full compares every byte of every room, on the device for device memory (a
 * compare kernel on the worker's stream) and on the CPU for host memory; sample compares 17 words (3 for
 * device memory) at fixed offsets; off compares nothing. The default is full for device memory and
 * sample for host memory. A verify error or a failed room on either side makes the initiator exit 1.
 *
 * copytest mode measures the copy rates the GPU paths are bounded by: pinned H2D/D2H whole and in 1 MiB
 * and 64 KiB pieces, pageable D2H, device-local d2d, and with a second device cuMemcpyPeerAsync and a
 * unified-address d2d copy (the CUDA IPC reference).
 *
 * Threads: main (arguments, control socket, reporting), the engine's I/O threads (callbacks only enqueue),
 * on the initiator T worker threads, on the target one offer thread per session.
 *
 * Files: this one (flags, main); pdxfer_common.c (what both sides share); pdxfer_target.c,
 * pdxfer_initiator.c, pdxfer_copytest.c (the modes); pdxfer_internal.h (their shared types).
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdxfer_internal.h"

static void on_signal(int sig)
{
    (void)sig;
    pdx__stop_flag = 1;
}

/* ---- Numbers. ---- */

/* A non-negative integer with an optional k/m/g suffix (binary). */
static int parse_size(const char *s, unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || s[0] == '-')
        return -1;
    unsigned shift = 0;
    if (*end == 'k' || *end == 'K')
        shift = 10;
    else if (*end == 'm' || *end == 'M')
        shift = 20;
    else if (*end == 'g' || *end == 'G')
        shift = 30;
    if (shift != 0)
        end++;
    if (*end != '\0' || v > (max >> shift))
        return -1;
    *out = v << shift;
    return 0;
}

static long need_int(const char *flag, const char *v, long lo, long hi)
{
    unsigned long long x;
    if (v == NULL || parse_size(v, (unsigned long long)hi, &x) != 0 || (long long)x < lo) {
        fprintf(stderr, "pdxfer-bench: %s wants an integer in [%ld, %ld]\n", flag, lo, hi);
        exit(2);
    }
    return (long)x;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage:\n"
        "  pdxfer-bench --mode target --listen HOST:PORT [--backend auto|tcp|rdma|cuda_ipc] [--mem "
        "host|cuda|cuda_vmm]\n"
        "               [--device N] [--io-threads N] [--staging-chunks N] [--chunk-bytes N] [--json]\n"
        "  pdxfer-bench --mode initiator --peer HOST:PORT --backend B --mem host|cuda|cuda_vmm\n"
        "               --block-size BYTES --batch N --threads N --conns N --duration SECONDS [--json]\n"
        "               [--verify full|sample|off] [--device N] [--staging-chunks N] [--chunk-bytes N]\n"
        "               [--io-threads N] [--timeout-ms N] [--parts N] [--compute-us US]\n"
        "  pdxfer-bench --mode copytest --mem cuda [--device N] [--peer-device M] [--block-size BYTES]\n"
        "               [--duration SECONDS] [--json]\n"
        "cuda_vmm: device memory from cuMemCreate, shared by CUDA IPC as a file descriptor.\n"
        "--verify: full compares every byte of every room (on the device for device memory), sample 17\n"
        "  words of each (3 for device memory), off nothing; default full for cuda and cuda_vmm, sample\n"
        "  for host memory. The initiator exits 1 when a room failed on either side or a byte was wrong.\n"
        "--parts N --compute-us US: the target computes each room for US microseconds and publishes it in\n"
        "  N parts as it goes (pdr_xfer_push_open/part; --parts 0: the whole offer once computed), and\n"
        "  reports the tail from the end of compute to completion.\n"
        "Sizes take k/m/g suffixes (binary). The target also listens on PORT+1 for the control socket.\n");
}

int main(int argc, char **argv)
{
    struct args a = {.mode = NULL,
                     .backend = "auto",
                     .mem = "host",
                     .device = 0,
                     .peer_device = -1,
                     .threads = 1,
                     .conns = 0,
                     .batch = 1,
                     .block = 0,
                     .duration = 10,
                     .verify = VERIFY_AUTO,
                     .timeout_ms = 120000};
    int have_block = 0;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (strcmp(f, "--mode") == 0 && v)
            a.mode = v;
        else if (strcmp(f, "--listen") == 0 && v)
            a.listen = v;
        else if (strcmp(f, "--peer") == 0 && v)
            a.peer = v;
        else if (strcmp(f, "--backend") == 0 && v)
            a.backend = v;
        else if (strcmp(f, "--mem") == 0 && v)
            a.mem = v;
        else if (strcmp(f, "--device") == 0)
            a.device = (int)need_int(f, v, 0, 1023);
        else if (strcmp(f, "--peer-device") == 0)
            a.peer_device = (int)need_int(f, v, 0, 1023);
        else if (strcmp(f, "--block-size") == 0) {
            a.block = (size_t)need_int(f, v, 1, 1L << 40);
            have_block = 1;
        } else if (strcmp(f, "--batch") == 0)
            a.batch = need_int(f, v, 1, 65536);
        else if (strcmp(f, "--threads") == 0)
            a.threads = (int)need_int(f, v, 1, 4096);
        else if (strcmp(f, "--conns") == 0)
            a.conns = (int)need_int(f, v, 1, 64);
        else if (strcmp(f, "--io-threads") == 0)
            a.io_threads = (int)need_int(f, v, 1, 64);
        else if (strcmp(f, "--staging-chunks") == 0)
            a.staging_chunks = (size_t)need_int(f, v, 1, 1024);
        else if (strcmp(f, "--chunk-bytes") == 0)
            a.chunk_bytes = (size_t)need_int(f, v, 1, 1L << 30);
        else if (strcmp(f, "--verify") == 0) {
            int m = VERIFY_OFF;
            while (v != NULL && m <= VERIFY_FULL && strcmp(v, pdx__verify_names[m]) != 0)
                m++;
            if (v == NULL || m > VERIFY_FULL) {
                fprintf(stderr, "pdxfer-bench: --verify is full, sample or off\n");
                return 2;
            }
            a.verify = m;
        } else if (strcmp(f, "--parts") == 0)
            a.parts = (int)need_int(f, v, 0, 4096);
        else if (strcmp(f, "--compute-us") == 0)
            a.compute_us = need_int(f, v, 0, 100000000);
        else if (strcmp(f, "--timeout-ms") == 0)
            a.timeout_ms = (uint32_t)need_int(f, v, 1, 3600000);
        else if (strcmp(f, "--duration") == 0) {
            char *end;
            errno = 0;
            a.duration = v ? strtod(v, &end) : -1;
            if (v == NULL || errno != 0 || *end != '\0' || !(a.duration > 0 && a.duration <= 86400)) {
                fprintf(stderr, "pdxfer-bench: --duration wants seconds in (0, 86400]\n");
                return 2;
            }
        } else {
            takes = 0;
            if (strcmp(f, "--json") == 0)
                a.json = 1;
            else if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
                usage(stdout);
                return 0;
            } else {
                fprintf(stderr, "pdxfer-bench: unknown or incomplete option %s\n", f);
                usage(stderr);
                return 2;
            }
        }
        i += takes;
    }
    if (strcmp(a.mem, "host") != 0 && strcmp(a.mem, "cuda") != 0 && strcmp(a.mem, "cuda_vmm") != 0) {
        fprintf(stderr, "pdxfer-bench: --mem is host, cuda or cuda_vmm (cuMemCreate memory)\n");
        return 2;
    }
    if (a.verify == VERIFY_AUTO)
        a.verify = pdx__is_cuda(&a) ? VERIFY_FULL : VERIFY_SAMPLE;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (a.mode != NULL && strcmp(a.mode, "target") == 0)
        return pdx__run_target(&a);
    if (a.mode != NULL && strcmp(a.mode, "initiator") == 0) {
        if (!have_block) {
            fprintf(stderr, "pdxfer-bench: --block-size is required\n");
            return 2;
        }
        return pdx__run_initiator(&a);
    }
    if (a.mode != NULL && strcmp(a.mode, "copytest") == 0)
        return pdx__run_copytest(&a);
    usage(stderr);
    return 2;
}
