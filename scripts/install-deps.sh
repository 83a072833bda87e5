#!/bin/sh
# Installs the Debian 12 packages pdrouter builds, tests and benchmarks with. Idempotent.
set -eu
PKGS="build-essential cmake pkgconf git ca-certificates \
 libuv1-dev libh2o-dev libcurl4-openssl-dev libyaml-dev libibverbs-dev libssl-dev libjansson-dev \
 curl python3 nghttp2-client wrk nginx-light iperf3 jq bc clang-format openssl"
# routing/tokenizer*.c: PCRE2 for the pre-tokenizer patterns, utf8proc for NFC.
PKGS="$PKGS libpcre2-dev libutf8proc-dev"
# KV events (precise_prefix): ZeroMQ and msgpack-c in the router and pdsim.
PKGS="$PKGS libzmq3-dev libmsgpack-dev"
# pdbench --report draws its plots with gnuplot (PNG through the cairo terminal).
PKGS="$PKGS gnuplot-nox"
# ss (iproute2): router_conn_limit counts the router's connections to a worker.
PKGS="$PKGS iproute2"
# HTTP/2 flow control in the body-budget test (Debian's /usr/bin/python3).
PKGS="$PKGS python3-h2"
# Browser test of the admin status page.
PKGS="$PKGS chromium chromium-driver python3-selenium"
# DNS discovery test: a real DNS server on a loopback port (/usr/sbin/dnsmasq, without the system service).
PKGS="$PKGS dnsmasq-base"
# Offline checks of deploy/: kubectl (for `kubectl kustomize`) and the Kubernetes schema models. Debian's
# kubectl comes with kubernetes-client; a machine that already has another kubectl keeps it (the two
# packages ship the same file).
PKGS="$PKGS python3-kubernetes python3-yaml"
command -v kubectl >/dev/null 2>&1 || PKGS="$PKGS kubernetes-client"
# docs_openapi validates docs/openapi.yaml with openapi-spec-validator. Debian ships it as
# python3-openapi-spec-validator from Debian 13 on; Debian 12 has no such package, so it is asked for
# only where apt knows it (elsewhere the test uses the default python3's copy, or is skipped).
if apt-cache show python3-openapi-spec-validator >/dev/null 2>&1; then
    PKGS="$PKGS python3-openapi-spec-validator"
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
