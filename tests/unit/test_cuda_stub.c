/*
 * The CUDA loader without a GPU: every call answers PDR_ENOTSUP, nothing crashes, nothing is printed.
 *
 *   test_cuda_stub nolib   no libcuda.so.1 can be loaded (skipped, 77, where a real driver is installed)
 *   test_cuda_stub stub    LD_LIBRARY_PATH points at a libcuda.so.1 that is the toolkit's stub library, which
 *                          answers CUDA_ERROR_STUB_LIBRARY to everything (tests/cuda.cmake sets it up)
 *
 * Single-threaded; the loader caches its result per process, so each mode is its own ctest entry.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runner.h"
#include "gpu_cuda.h"
#include "err.h"

/* Every entry point of gpu_cuda.h, called with plausible arguments, must answer PDR_ENOTSUP. */
static void check_all_unsupported(void)
{
    CHECK(pdr__cuda_init() == PDR_ENOTSUP);
    CHECK(pdr__cuda_init() == PDR_ENOTSUP); /* cached */
    CHECK(pdr__cuda_device_count() == PDR_ENOTSUP);
    CHECK(pdr__cuda_driver_version() == 0);
    const char *why = pdr__cuda_init_error();
    CHECK(why != NULL && why[0] != '\0');

    char host[64] = {0};
    int is_dev = 7, ord = 7;
    CHECK(pdr__cuda_ptr_info(host, &is_dev, &ord) == PDR_ENOTSUP);
    CHECK(pdr__cuda_bind(0) == PDR_ENOTSUP);
    void *p = host;
    CHECK(pdr__cuda_host_alloc(4096, &p) == PDR_ENOTSUP);
    pdr__cuda_host_free(NULL);
    void *s = NULL, *e = NULL;
    CHECK(pdr__cuda_stream_create(&s) == PDR_ENOTSUP);
    CHECK(pdr__cuda_event_create(&e) == PDR_ENOTSUP);
    pdr__cuda_stream_destroy(NULL);
    pdr__cuda_event_destroy(NULL);
    void *fake = (void *)(uintptr_t)0x1000;
    CHECK(pdr__cuda_event_record(fake, NULL) == PDR_ENOTSUP);
    CHECK(pdr__cuda_event_query(fake) == PDR_ENOTSUP);
    CHECK(pdr__cuda_event_sync(fake) == PDR_ENOTSUP);
    CHECK(pdr__cuda_stream_sync(NULL) == PDR_ENOTSUP);
    CHECK(pdr__cuda_copy_d2h_async(host, fake, 16, NULL) == PDR_ENOTSUP);
    CHECK(pdr__cuda_copy_h2d_async(fake, host, 16, NULL) == PDR_ENOTSUP);
    CHECK(pdr__cuda_copy_d2d_async(fake, fake, 16, NULL) == PDR_ENOTSUP);
    CHECK(pdr__cuda_copy_peer_async(fake, 1, fake, 0, 16, NULL) == PDR_ENOTSUP);
    unsigned char h[PDR_CUDA_IPC_HANDLE_BYTES] = {0};
    uint64_t off = 0;
    CHECK(pdr__cuda_ipc_export(fake, h, &off) == PDR_ENOTSUP);
    CHECK(pdr__cuda_ipc_open(h, &p) == PDR_ENOTSUP);
    CHECK(pdr__cuda_ipc_close(fake) == PDR_ENOTSUP);
    int fd = 0;
    CHECK(pdr__cuda_dmabuf_fd(fake, 4096, &fd) == PDR_ENOTSUP);
    char bus[32];
    CHECK(pdr__cuda_pci_bus_id(0, bus, sizeof(bus)) == PDR_ENOTSUP);
    unsigned char uuid[16];
    CHECK(pdr__cuda_uuid(0, uuid) == PDR_ENOTSUP);
    CHECK(pdr__cuda_device_name(0, bus, sizeof(bus)) == PDR_ENOTSUP);
    CHECK(pdr__cuda_mem_alloc(4096, &p) == PDR_ENOTSUP);
    pdr__cuda_mem_free(NULL);
    pdr__cuda_mem_free(fake);
    CHECK(pdr__cuda_memset(fake, 0, 16) == PDR_ENOTSUP);
    CHECK(pdr__cuda_copy_sync(host, host + 8, 8) == PDR_ENOTSUP);
    CHECK(pdr__cuda_last_error() != NULL);
}

/* No libcuda.so.1 at all. */
static void test_nolib(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib != NULL) {
        printf("a libcuda.so.1 is installed here: skipped\n");
        dlclose(lib);
        exit(77);
    }
    check_all_unsupported();
    CHECK(strstr(pdr__cuda_init_error(), "no CUDA driver") != NULL);
    CHECK(strcmp(pdr__cuda_last_error(), "") == 0); /* nothing reached a driver */
}

/* The toolkit's stub libcuda.so.1 on LD_LIBRARY_PATH. */
static void test_stub(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        printf("no stub libcuda.so.1 on LD_LIBRARY_PATH (toolkit stubs missing): skipped\n");
        exit(77);
    }
    /* The stub answers CUDA_ERROR_STUB_LIBRARY (34) even to cuGetProcAddress. */
    check_all_unsupported();
    printf("init error: %s; last CUresult: %s\n", pdr__cuda_init_error(), pdr__cuda_last_error());
    CHECK(strstr(pdr__cuda_init_error(), "stub") != NULL);
    CHECK(strcmp(pdr__cuda_last_error(), "CUDA_ERROR_STUB_LIBRARY") == 0);
    dlclose(lib);
}

static const pdr_test_case_t cases[] = {{"nolib", test_nolib, 30}, {"stub", test_stub, 30}};

/* test_cuda_stub [nolib|stub]: the case names; ctest runs each in its own environment. */
int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
