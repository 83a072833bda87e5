#!/bin/sh
# Builds tests/gpu/test_xfer_gpu without the project's CMake (for a GPU machine that lacks the router's
# dependencies): the transport, common/ and the test, nothing else (needs libibverbs' headers and library). Usage: sh tests/gpu/build_standalone.sh OUTDIR
set -e
out=${1:-/tmp}
mkdir -p "$out"
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
F="-std=gnu11 -O2 -g -Wall -Wextra -Werror"
for c in cuda cuda_mem cuda_pattern; do
    gcc $F -I"$CUDA_INC" -Icommon -Itransport -Itransport/include -c transport/$c.c -o "$out/$c.o"
done
gcc $F -Icommon -Itransport -Itransport/include -Itests/integration common/err.c common/util.c common/buf.c \
    transport/engine.c transport/engine_room.c transport/conn.c transport/session.c transport/ctl.c transport/mover_tcp.c \
    transport/mover_staging.c transport/mover_ipc.c transport/mover_ipc_export.c transport/mover_rdma.c transport/wire.c transport/fdpass.c transport/rdma.c transport/rdma_mr.c transport/rdma_post.c transport/rdma_wire.c transport/rdma_plan.c \
    transport/rdma_topo.c "$out/cuda.o" "$out/cuda_mem.o" "$out/cuda_pattern.o" tests/gpu/test_xfer_gpu.c -o "$out/test_xfer_gpu" -libverbs -lpthread -ldl
