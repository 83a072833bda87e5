/*
 * cuda_pattern.c — the pattern kernels of gpu_cuda.h (tests and benchmarks): hand-written PTX,
 * JIT-compiled per device, fill and check.
 */
#include "cuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Tests and benchmarks: the pattern kernels ----
 *
 * Hand-written PTX (no CUDA compiler at build time), JIT-compiled by the driver once per device on first
 * use and kept until exit, like the primary contexts. pdr_pattern_fill writes word w of the buffer as
 * pdr__cuda_pattern_word(seed, word0 + w); pdr_pattern_check counts the words that differ from it and
 * keeps the lowest such index (out[0] += count, out[1] = min(out[1], index)). Both are grid-stride
 * loops over 8-byte words; the check loads four words per thread before comparing them, so that four
 * loads are in flight per thread. Parameters: buffer, word count, seed * 0x9E3779B97F4A7C15 (computed
 * on the host), word0 and, for the check, out.
 */
/* The PTX text keeps one instruction a line. */
/* clang-format off */
#define PDR_PTX_MIX(x, t)                                                                                    \
    "    mul.lo.u64 " x ", " x ", 0xBF58476D1CE4E5B9;\n"                                                     \
    "    xor.b64 " x ", " x ", %seed;\n"                                                                     \
    "    shr.u64 " t ", " x ", 30;\n"                                                                        \
    "    xor.b64 " x ", " x ", " t ";\n"                                                                     \
    "    mul.lo.u64 " x ", " x ", 0xBF58476D1CE4E5B9;\n"                                                     \
    "    shr.u64 " t ", " x ", 27;\n"                                                                        \
    "    xor.b64 " x ", " x ", " t ";\n"                                                                     \
    "    mul.lo.u64 " x ", " x ", 0x94D049BB133111EB;\n"                                                     \
    "    shr.u64 " t ", " x ", 31;\n"                                                                        \
    "    xor.b64 " x ", " x ", " t ";\n"
/* %i = blockIdx.x * blockDim.x + threadIdx.x, %stride = gridDim.x * blockDim.x. */
#define PDR_PTX_INDEX                                                                                        \
    "    cvta.to.global.u64 %base, %base;\n"                                                                 \
    "    mov.u32 %r1, %ctaid.x;\n"                                                                           \
    "    mov.u32 %r2, %ntid.x;\n"                                                                            \
    "    mov.u32 %r3, %tid.x;\n"                                                                             \
    "    mov.u32 %r4, %nctaid.x;\n"                                                                          \
    "    mul.wide.u32 %i, %r1, %r2;\n"                                                                       \
    "    cvt.u64.u32 %t, %r3;\n"                                                                             \
    "    add.u64 %i, %i, %t;\n"                                                                              \
    "    mul.wide.u32 %stride, %r4, %r2;\n"
/* Lane k of a check iteration: load word %jk when it is below %n (%pk). */
#define PDR_PTX_LOAD(k)                                                                                      \
    "    setp.lt.u64 %p" #k ", %j" #k ", %n;\n"                                                              \
    "    shl.b64 %a" #k ", %j" #k ", 3;\n"                                                                   \
    "    add.u64 %a" #k ", %base, %a" #k ";\n"                                                               \
    "    @%p" #k " ld.global.u64 %v" #k ", [%a" #k "];\n"
/* Lane k: %qk = loaded and different from the pattern; count it and keep the lowest index. */
#define PDR_PTX_CMP(k)                                                                                       \
    "    add.u64 %e" #k ", %w0, %j" #k ";\n"                                                                 \
    PDR_PTX_MIX("%e" #k, "%t")                                                                               \
    "    setp.ne.and.u64 %q" #k ", %v" #k ", %e" #k ", %p" #k ";\n"                                          \
    "    selp.u64 %t, 1, 0, %q" #k ";\n"                                                                     \
    "    add.u64 %bad, %bad, %t;\n"                                                                          \
    "    @%q" #k " min.u64 %first, %first, %j" #k ";\n"

static const char pattern_ptx[] =
    ".version 7.0\n"
    ".target sm_52\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry pdr_pattern_fill(.param .u64 p_dst, .param .u64 p_n, .param .u64 p_seed,\n"
    "                                 .param .u64 p_w0)\n"
    "{\n"
    "    .reg .pred %p;\n"
    "    .reg .b32 %r<5>;\n"
    "    .reg .b64 %base, %n, %seed, %w0, %i, %stride, %t, %x, %a;\n"
    "    ld.param.u64 %base, [p_dst];\n"
    "    ld.param.u64 %n, [p_n];\n"
    "    ld.param.u64 %seed, [p_seed];\n"
    "    ld.param.u64 %w0, [p_w0];\n"
    PDR_PTX_INDEX
    "    setp.ge.u64 %p, %i, %n;\n"
    "    @%p bra DONE;\n"
    "LOOP:\n"
    "    add.u64 %x, %w0, %i;\n"
    PDR_PTX_MIX("%x", "%t")
    "    shl.b64 %a, %i, 3;\n"
    "    add.u64 %a, %base, %a;\n"
    "    st.global.u64 [%a], %x;\n"
    "    add.u64 %i, %i, %stride;\n"
    "    setp.lt.u64 %p, %i, %n;\n"
    "    @%p bra LOOP;\n"
    "DONE:\n"
    "    ret;\n"
    "}\n"
    "\n"
    ".visible .entry pdr_pattern_check(.param .u64 p_src, .param .u64 p_n, .param .u64 p_seed,\n"
    "                                  .param .u64 p_w0, .param .u64 p_out)\n"
    "{\n"
    "    .reg .pred %p, %p0, %p1, %p2, %p3, %q0, %q1, %q2, %q3;\n"
    "    .reg .b32 %r<5>;\n"
    "    .reg .b64 %base, %n, %seed, %w0, %i, %stride, %stride4, %t, %bad, %first, %out;\n"
    "    .reg .b64 %j0, %j1, %j2, %j3, %a0, %a1, %a2, %a3, %v0, %v1, %v2, %v3, %e0, %e1, %e2, %e3;\n"
    "    ld.param.u64 %base, [p_src];\n"
    "    ld.param.u64 %n, [p_n];\n"
    "    ld.param.u64 %seed, [p_seed];\n"
    "    ld.param.u64 %w0, [p_w0];\n"
    PDR_PTX_INDEX
    "    shl.b64 %stride4, %stride, 2;\n"
    "    mov.u64 %bad, 0;\n"
    "    mov.u64 %first, -1;\n"
    "    mov.u64 %v0, 0;\n"
    "    mov.u64 %v1, 0;\n"
    "    mov.u64 %v2, 0;\n"
    "    mov.u64 %v3, 0;\n"
    "    setp.ge.u64 %p, %i, %n;\n"
    "    @%p bra REDUCE;\n"
    "LOOP:\n"
    "    mov.u64 %j0, %i;\n"
    "    add.u64 %j1, %j0, %stride;\n"
    "    add.u64 %j2, %j1, %stride;\n"
    "    add.u64 %j3, %j2, %stride;\n"
    PDR_PTX_LOAD(0) PDR_PTX_LOAD(1) PDR_PTX_LOAD(2) PDR_PTX_LOAD(3)
    PDR_PTX_CMP(0) PDR_PTX_CMP(1) PDR_PTX_CMP(2) PDR_PTX_CMP(3)
    "    add.u64 %i, %i, %stride4;\n"
    "    setp.lt.u64 %p, %i, %n;\n"
    "    @%p bra LOOP;\n"
    "REDUCE:\n"
    "    setp.eq.u64 %p, %bad, 0;\n"
    "    @%p bra DONE;\n"
    "    ld.param.u64 %out, [p_out];\n"
    "    cvta.to.global.u64 %out, %out;\n"
    "    red.global.add.u64 [%out], %bad;\n"
    "    red.global.min.u64 [%out+8], %first;\n"
    "DONE:\n"
    "    ret;\n"
    "}\n";
/* clang-format on */

const char *pdr__cuda_pattern_ptx(void)
{
    return pattern_ptx;
}

#define PDR_PATTERN_THREADS 256u
#define PDR_PATTERN_MAX_BLOCKS 2048u /* enough to fill any GPU of today; the loops stride past it */

static pthread_mutex_t pattern_lock = PTHREAD_MUTEX_INITIALIZER;
static CUfunction pattern_fill_fn[PDR_CUDA_MAX_DEVICES], pattern_check_fn[PDR_CUDA_MAX_DEVICES];

/* The kernels in the calling thread's context, which must be a primary context this file retained (the
 * module belongs to it); loaded on first use per device. */
static int pattern_functions(CUfunction *fill_fn, CUfunction *check_fn)
{
    CUcontext cur = NULL;
    if (pdr__cu.CtxGetCurrent(&cur) != CUDA_SUCCESS || cur == NULL)
        return pdr__cuda_fail(PDR_EINVAL, "no current context (call pdr__cuda_bind first)");
    int ord = -1;
    pthread_mutex_lock(&pdr__cuda_ctx_lock);
    for (int i = 0; i < pdr__cuda_ndevices && ord < 0; i++)
        if (pdr__cuda_primary[i] == cur)
            ord = i;
    pthread_mutex_unlock(&pdr__cuda_ctx_lock);
    if (ord < 0)
        return pdr__cuda_fail(PDR_EINVAL, "the current context is not a bound device's");
    int rc = 0;
    pthread_mutex_lock(&pattern_lock);
    if (pattern_fill_fn[ord] == NULL) {
        CUmodule mod = NULL;
        CUfunction f = NULL, c = NULL;
        rc = pdr__cuda_tr(pdr__cu.ModuleLoadData(&mod, pattern_ptx));
        if (rc == 0)
            rc = pdr__cuda_tr(pdr__cu.ModuleGetFunction(&f, mod, "pdr_pattern_fill"));
        if (rc == 0)
            rc = pdr__cuda_tr(pdr__cu.ModuleGetFunction(&c, mod, "pdr_pattern_check"));
        if (rc == 0) {
            pattern_fill_fn[ord] = f;
            pattern_check_fn[ord] = c;
        }
    }
    *fill_fn = pattern_fill_fn[ord];
    *check_fn = pattern_check_fn[ord];
    pthread_mutex_unlock(&pattern_lock);
    return rc;
}

static int pattern_args_ok(const void *dev, size_t len)
{
    return dev != NULL && (uintptr_t)dev % 8 == 0 && len % 8 == 0;
}

static unsigned pattern_blocks(uint64_t nwords)
{
    uint64_t b = (nwords + PDR_PATTERN_THREADS - 1) / PDR_PATTERN_THREADS;
    return b > PDR_PATTERN_MAX_BLOCKS ? PDR_PATTERN_MAX_BLOCKS : (unsigned)b;
}

/* Launches the fill kernel (check 0) or the check kernel (check 1, which writes its result to scratch)
 * over the len / 8 words at dev, for the pattern of seed and word0. */
static int pattern_launch(int check, const void *dev, size_t len, uint64_t seed, uint64_t word0,
                          void *scratch, void *stream)
{
    CUfunction fill_fn = NULL, check_fn = NULL;
    int rc = pattern_functions(&fill_fn, &check_fn);
    if (rc != 0)
        return rc;
    unsigned long long p = pdr__cuda_dptr(dev), n = len / 8, s = seed * PDR_PATTERN_SEED_MUL, w0 = word0,
                       o = check ? pdr__cuda_dptr(scratch) : 0;
    void *args[] = {&p, &n, &s, &w0, &o}; /* the fill kernel takes the first four */
    return pdr__cuda_tr(pdr__cu.LaunchKernel(check ? check_fn : fill_fn, pattern_blocks(n), 1, 1,
                                             PDR_PATTERN_THREADS, 1, 1, 0, (CUstream)stream, args, NULL));
}

int pdr__cuda_pattern_fill(void *dev, size_t len, uint64_t seed, uint64_t word0, void *stream)
{
    PDR__CUDA_BOUND();
    if (!pattern_args_ok(dev, len))
        return pdr__cuda_fail(PDR_EINVAL, "pattern buffers are whole 8-byte words");
    if (len == 0)
        return 0;
    return pattern_launch(0, dev, len, seed, word0, NULL, stream);
}

int pdr__cuda_pattern_check(const void *dev, size_t len, uint64_t seed, uint64_t word0, void *scratch,
                            void *stream, struct pdr_cuda_check *out)
{
    PDR__CUDA_BOUND();
    if (out == NULL || scratch == NULL || (uintptr_t)scratch % 8 != 0 || !pattern_args_ok(dev, len))
        return pdr__cuda_fail(PDR_EINVAL, "pattern buffers are whole 8-byte words");
    out->mismatches = 0;
    out->first_bad = UINT64_MAX;
    if (len == 0)
        return 0;
    static const uint64_t init[2] = {0, UINT64_MAX};
    uint64_t res[2] = {0, UINT64_MAX};
    int rc =
        pdr__cuda_tr(pdr__cu.MemcpyHtoDAsync(pdr__cuda_dptr(scratch), init, sizeof(init), (CUstream)stream));
    if (rc == 0)
        rc = pattern_launch(1, dev, len, seed, word0, scratch, stream);
    if (rc == 0)
        rc = pdr__cuda_tr(
            pdr__cu.MemcpyDtoHAsync(res, pdr__cuda_dptr(scratch), sizeof(res), (CUstream)stream));
    if (rc == 0)
        rc = pdr__cuda_tr(pdr__cu.StreamSynchronize((CUstream)stream));
    if (rc == 0) {
        out->mismatches = res[0];
        out->first_bad = res[1];
    }
    return rc;
}
