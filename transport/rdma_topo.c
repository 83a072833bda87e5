/*
 * NIC choice by PCIe topology: which RDMA device sits closest to a GPU, read from a sysfs tree (the real
 * /sys, or a fake one a test builds). Stateless, any thread; reads a handful of small files and links.
 * Ranking (as mooncake's src/topology.cpp and UCCL's PCIe-distance pick): longest shared run of PCI path
 * components (same switch > same root port > same root complex), then same NUMA node, then name.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "rdma.h"

/* "0000:3B:00.0" or "00000000:3b:00.0" → "0000:3b:00.0". Returns 0 or -1 when it does not look like one. */
static int normalize_bus_id(const char *in, char *out, size_t cap)
{
    size_t n = strlen(in);
    if (n < 7 || n >= cap || n > 32)
        return -1;
    const char *colon = strchr(in, ':');
    if (colon == NULL)
        return -1;
    if (colon - in == 8)
        in += 4;
    size_t j = 0;
    for (; *in != '\0'; in++) {
        unsigned char c = (unsigned char)*in;
        if (!isxdigit(c) && c != ':' && c != '.')
            return -1;
        out[j++] = (char)tolower(c);
    }
    out[j] = '\0';
    return 0;
}

/* The path below ".../devices/", or NULL. */
static const char *pci_part(const char *real)
{
    const char *p = strstr(real, "/devices/");
    return p == NULL ? NULL : p + strlen("/devices/");
}

/* Number of leading '/'-separated components a and b share. */
static int shared_components(const char *a, const char *b)
{
    int n = 0;
    for (;;) {
        const char *ea = strchr(a, '/'), *eb = strchr(b, '/');
        size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
        if (la == 0 || la != lb || memcmp(a, b, la) != 0)
            return n;
        n++;
        if (ea == NULL || eb == NULL)
            return n;
        a = ea + 1;
        b = eb + 1;
    }
}

static int read_numa(const char *dev_path)
{
    char p[PATH_MAX], buf[32];
    if (snprintf(p, sizeof(p), "%s/numa_node", dev_path) >= (int)sizeof(p))
        return -1;
    FILE *f = fopen(p, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *end;
    long v = strtol(buf, &end, 10);
    if (end == buf || v < 0 || v > 4096)
        return -1;
    return (int)v;
}

struct cand {
    int shared;
    int same_numa;
};

/* Is a better than the current best b (names break ties, the smaller wins)? */
static int better(const struct cand *a, const char *an, const struct cand *b, const char *bn)
{
    if (a->shared != b->shared)
        return a->shared > b->shared;
    if (a->same_numa != b->same_numa)
        return a->same_numa > b->same_numa;
    return strcmp(an, bn) < 0;
}

int pdr__rdma_pick_nic(const char *sysfs_root, const char *gpu_pci_bus_id, char *name, size_t len)
{
    if (sysfs_root == NULL || name == NULL || len == 0)
        return PDR_EINVAL;
    char path[PATH_MAX], gpu_real[PATH_MAX];
    const char *gpu_pci = NULL;
    int gpu_numa = -1;
    char bus[40];
    if (gpu_pci_bus_id != NULL && normalize_bus_id(gpu_pci_bus_id, bus, sizeof(bus)) == 0 &&
        snprintf(path, sizeof(path), "%s/bus/pci/devices/%s", sysfs_root, bus) < (int)sizeof(path) &&
        realpath(path, gpu_real) != NULL) {
        gpu_pci = pci_part(gpu_real);
        gpu_numa = read_numa(gpu_real);
    }

    if (snprintf(path, sizeof(path), "%s/class/infiniband", sysfs_root) >= (int)sizeof(path))
        return PDR_EINVAL;
    DIR *d = opendir(path);
    if (d == NULL)
        return PDR_ENOTSUP;
    char best[256] = "";
    struct cand bc = {-1, 0};
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof(best))
            continue;
        char dev[PATH_MAX], real[PATH_MAX];
        struct cand c = {0, 0};
        if (snprintf(dev, sizeof(dev), "%s/%s/device", path, e->d_name) < (int)sizeof(dev) &&
            realpath(dev, real) != NULL) {
            const char *nic_pci = pci_part(real);
            if (gpu_pci != NULL && nic_pci != NULL)
                c.shared = shared_components(gpu_pci, nic_pci);
            int numa = read_numa(real);
            c.same_numa = gpu_numa >= 0 && numa == gpu_numa;
        }
        if (best[0] == '\0' || better(&c, e->d_name, &bc, best)) {
            bc = c;
            snprintf(best, sizeof(best), "%s", e->d_name);
        }
    }
    closedir(d);
    if (best[0] == '\0')
        return PDR_ENOTSUP;
    if (strlen(best) >= len)
        return PDR_ETOOBIG;
    snprintf(name, len, "%s", best);
    return 0;
}
