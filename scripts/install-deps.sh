#!/bin/sh
# Installs the Debian 12 packages pdrouter needs. Idempotent.
#
#   scripts/install-deps.sh           what building and running needs: the compiler and the libraries'
#                                     -dev packages, python3 and curl for the demo (make, make run)
#   scripts/install-deps.sh --test    that, and what the test suite and the benchmarks use (make test,
#                                     .ci/run): browsers, DNS and Kubernetes tools, load generators, ...
#   scripts/install-deps.sh --print [--test]   print the package list, one a line, and install nothing
#   scripts/install-deps.sh --print-build      print the build packages only (tests/deploy/test_deploy.py
#                                     holds the Dockerfile's build stage to them)
set -eu
test_deps=0
print=0
for a in "$@"; do
    case $a in
    --test) test_deps=1 ;;
    --print) print=1 ;;
    --print-build) print=2 ;;
    *)
        echo "usage: $0 [--test] [--print | --print-build]" >&2
        exit 2
        ;;
    esac
done

# ---- building (the libraries the CMake build links: CMakeLists.txt's pkg_check_modules) ----
# python3: tests/CMakeLists.txt asks for it at configure time (the test scripts), and the demo uses it.
BUILD="build-essential cmake pkgconf python3 \
 libuv1-dev libh2o-dev libcurl4-openssl-dev libyaml-dev libibverbs-dev libssl-dev libjansson-dev libnghttp2-dev"
# tokenizer/tokenizer*.c: PCRE2 for the pre-tokenizer patterns, utf8proc for NFC.
BUILD="$BUILD libpcre2-dev libutf8proc-dev"
# KV events (precise_prefix): ZeroMQ and msgpack-c in the router and pdsim.
BUILD="$BUILD libzmq3-dev libmsgpack-dev"
# The endpoint picker (router/epp/): protobuf-c's runtime and protoc-c, which generates its messages' C at
# build time from router/epp/proto/.
BUILD="$BUILD libprotobuf-c-dev protobuf-c-compiler"
# ---- running the demo (scripts/demo.sh): requests sent with curl ----
RUN="ca-certificates curl"

# ---- the test suite and the benchmarks ----
TEST="git nghttp2-client wrk nginx-light iperf3 jq bc clang-format openssl"
# The Release build check and the fuzz trees build with clang too (build_release_clang, make fuzz).
TEST="$TEST clang"
# pdbench --report draws its plots with gnuplot (PNG through the cairo terminal).
TEST="$TEST gnuplot-nox"
# ss (iproute2): router_conn_limit counts the router's connections to a worker.
TEST="$TEST iproute2"
# HTTP/2 flow control in the body-budget test (Debian's /usr/bin/python3).
TEST="$TEST python3-h2"
# The chat-template engine's reference: tests/tok/jinja_diff.py renders every fixture with jinja2 too.
TEST="$TEST python3-jinja2"
# The endpoint picker's gateway side (tests/integration/test_epp.py): gRPC for Debian's python3, and
# grpc_tools' protoc to compile router/epp/proto/ at test time.
TEST="$TEST python3-grpcio python3-protobuf python3-grpc-tools"
# Browser test of the admin status page.
TEST="$TEST chromium chromium-driver python3-selenium"
# DNS discovery test: a real DNS server on a loopback port (/usr/sbin/dnsmasq, without the system service).
TEST="$TEST dnsmasq-base"
# Offline checks of deploy/: kubectl (for `kubectl kustomize`) and the Kubernetes schema models. Debian's
# kubectl comes with kubernetes-client; a machine that already has another kubectl keeps it (the two
# packages ship the same file).
TEST="$TEST python3-kubernetes python3-yaml"
if [ "$test_deps" = 1 ]; then
    command -v kubectl >/dev/null 2>&1 || TEST="$TEST kubernetes-client"
    # docs_openapi validates docs/openapi.yaml with openapi-spec-validator. Debian ships it as
    # python3-openapi-spec-validator from Debian 13 on; Debian 12 has no such package, so it is asked for
    # only where apt knows it (elsewhere the test uses the default python3's copy, or is skipped).
    if apt-cache show python3-openapi-spec-validator >/dev/null 2>&1; then
        TEST="$TEST python3-openapi-spec-validator"
    fi
fi

PKGS="$BUILD $RUN"
[ "$test_deps" = 1 ] && PKGS="$PKGS $TEST"
if [ "$print" = 1 ]; then
    printf '%s\n' $PKGS
    exit 0
elif [ "$print" = 2 ]; then
    printf '%s\n' $BUILD
    exit 0
fi
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing
