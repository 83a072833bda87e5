/*
 * pdxfer-bench's copytest (--mode copytest): the copy rates GPU transfers are bounded by, pinned H2D/D2H
 * whole and in 1 MiB and 64 KiB pieces, pageable D2H, device-local d2d, and with a second device
 * cuMemcpyPeerAsync and a unified-address d2d copy (the CUDA IPC reference).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_cuda.h"
#include "err.h"
#include "pdxfer_internal.h"

enum copy_kind { H2D, D2H, D2D, PEER };

/* GB/s of copying `total` bytes in `piece`-byte copies on one stream, repeated for about `secs`. */
static double copy_rate(enum copy_kind k, void *dst, const void *src, size_t total, size_t piece,
                        void *stream, int dst_dev, int src_dev, double secs)
{
    double t0 = pdx__now_s(), el = 0;
    uint64_t bytes = 0;
    do {
        for (size_t off = 0; off < total; off += piece) {
            size_t n = total - off < piece ? total - off : piece;
            char *d = (char *)dst + off;
            const char *s = (const char *)src + off;
            int rc = k == H2D   ? pdr__cuda_copy_h2d_async(d, s, n, stream)
                     : k == D2H ? pdr__cuda_copy_d2h_async(d, s, n, stream)
                     : k == D2D ? pdr__cuda_copy_d2d_async(d, s, n, stream)
                                : pdr__cuda_copy_peer_async(d, dst_dev, s, src_dev, n, stream);
            if (rc != 0) {
                fprintf(stderr, "copytest: %s (%s)\n", pdr_strerror(rc), pdr__cuda_last_error());
                return -1;
            }
        }
        if (pdr__cuda_stream_sync(stream) != 0)
            return -1;
        bytes += total;
        el = pdx__now_s() - t0;
    } while (el < secs);
    return (double)bytes / el / 1e9;
}

int pdx__run_copytest(const struct args *a)
{
    struct args ca = *a;
    ca.mem = "cuda";
    pdx__cuda_setup(&ca);
    int ndev = pdr__cuda_device_count();
    int peer = a->peer_device >= 0 ? a->peer_device : ndev > 1 ? (a->device + 1) % ndev : -1;
    size_t total = a->block ? a->block : (size_t)256 << 20;
    double secs = a->duration > 0 ? a->duration : 1.0;
    char name[128] = "", bus[32] = "";
    (void)pdr__cuda_device_name(a->device, name, sizeof(name));
    (void)pdr__cuda_pci_bus_id(a->device, bus, sizeof(bus));
    printf("copytest: device %d (%s, %s), %zu bytes per round, %.1f s per measurement\n", a->device, name,
           bus, total, secs);
    void *dev = NULL, *dev2 = NULL, *pinned = NULL, *stream = NULL, *pageable = NULL;
    int rc = pdr__cuda_mem_alloc(total, &dev);
    if (rc == 0)
        rc = pdr__cuda_mem_alloc(total, &dev2);
    if (rc == 0)
        rc = pdr__cuda_host_alloc(total, &pinned);
    if (rc == 0)
        rc = pdr__cuda_stream_create(&stream);
    if (rc != 0 || posix_memalign(&pageable, 4096, total) != 0) {
        fprintf(stderr, "copytest: allocation: %s (%s)\n", pdr_strerror(rc), pdr__cuda_last_error());
        return 2;
    }
    memset(pinned, 1, total);
    memset(pageable, 1, total);
    struct {
        const char *label;
        enum copy_kind k;
        size_t piece;
        int use_pageable;
    } tests[] = {
        {"h2d_pinned_whole", H2D, total, 0},    {"d2h_pinned_whole", D2H, total, 0},
        {"h2d_pinned_1MiB", H2D, 1 << 20, 0},   {"d2h_pinned_1MiB", D2H, 1 << 20, 0},
        {"h2d_pinned_64KiB", H2D, 64 << 10, 0}, {"d2h_pinned_64KiB", D2H, 64 << 10, 0},
        {"d2h_pageable_whole", D2H, total, 1},  {"d2h_pageable_64KiB", D2H, 64 << 10, 1},
        {"d2d_same_device", D2D, total, 0},
    };
    size_t ntests = sizeof(tests) / sizeof(tests[0]);
    double rates[16];
    for (size_t i = 0; i < ntests; i++) {
        void *host = tests[i].use_pageable ? pageable : pinned;
        void *dst = tests[i].k == H2D ? dev : tests[i].k == D2H ? host : dev2;
        const void *src = tests[i].k == H2D ? host : dev;
        rates[i] = copy_rate(tests[i].k, dst, src, total, tests[i].piece, stream, a->device, a->device, secs);
        printf("copytest %-22s %8.2f GB/s\n", tests[i].label, rates[i]);
        fflush(stdout);
    }
    double peer_rate = -1, uva_rate = -1;
    void *pdev = NULL;
    if (peer >= 0 && peer != a->device && peer < ndev) {
        if (pdr__cuda_bind(peer) == 0 && pdr__cuda_mem_alloc(total, &pdev) == 0 &&
            pdr__cuda_bind(a->device) == 0) {
            peer_rate = copy_rate(PEER, pdev, dev, total, total, stream, peer, a->device, secs);
            uva_rate = copy_rate(D2D, pdev, dev, total, total, stream, peer, a->device, secs);
            printf("copytest peer_%d_to_%d_memcpypeer   %8.2f GB/s\n", a->device, peer, peer_rate);
            printf("copytest peer_%d_to_%d_d2d_unified  %8.2f GB/s\n", a->device, peer, uva_rate);
        } else {
            printf("copytest: device %d unusable for peer copies: %s\n", peer, pdr__cuda_last_error());
        }
    } else {
        printf("copytest: one device only, no peer copy\n");
    }
    if (a->json) {
        printf("{\"mode\":\"copytest\",\"device\":%d,\"bytes\":%zu", a->device, total);
        for (size_t i = 0; i < ntests; i++)
            printf(",\"%s_gb_per_s\":%.3f", tests[i].label, rates[i]);
        printf(",\"peer_device\":%d,\"peer_memcpypeer_gb_per_s\":%.3f,\"peer_d2d_unified_gb_per_s\":%.3f}\n",
               peer, peer_rate, uva_rate);
    }
    pdr__cuda_stream_destroy(stream);
    pdr__cuda_mem_free(pdev);
    pdr__cuda_mem_free(dev);
    pdr__cuda_mem_free(dev2);
    pdr__cuda_host_free(pinned);
    free(pageable);
    return 0;
}
