#!/bin/bash
# Installs the Debian 12 packages codecage needs to build and test, then
# configures and builds build/ (the default build). Idempotent: apt runs
# only when a package is missing. Sourced by demo.sh and test.sh.
set -euo pipefail

CODECAGE_PACKAGES=(gcc libc6-dev musl-tools pkg-config meson ninja-build libseccomp-dev libjansson-dev
        libsqlite3-dev libmicrohttpd-dev libcurl4-openssl-dev libssl-dev libmagic-dev file
        python3 python3-pytest bubblewrap procps iproute2 clang-format curl e2fsprogs
        openssl python3-pip libarchive-dev busybox-static docker-registry skopeo umoci
        apache2-utils tar mmdebstrap python3-venv mypy prometheus python3-matplotlib
        qemu-system-x86)

codecage_install_deps() {
        local missing=()
        for p in "${CODECAGE_PACKAGES[@]}"; do
                dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
                        missing+=("$p")
        done
        if ((${#missing[@]})); then
                echo "codecage: installing ${missing[*]}" >&2
                if [ "$(id -u)" != 0 ]; then
                        echo "codecage: run as root (or install: ${missing[*]})" >&2
                        exit 1
                fi
                DEBIAN_FRONTEND=noninteractive apt-get update -q
                DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
        fi
}

# codecage_build DIR [meson options...]
codecage_build() {
        local dir=$1
        shift
        if [ ! -f "$dir/build.ninja" ]; then
                meson setup "$dir" "$@" >/dev/null
        fi
        ninja --quiet -C "$dir"
}

# MCP: the pinned MCP clients the tests drive (tests/mcp/package-lock.json:
# Node 22, the conformance suite, the TypeScript SDK, the Inspector, into
# tests/mcp/node_modules; tests/mcp/next/package-lock.json: the clients of
# revision 2026-07-28, into tests/mcp/next/node_modules). Debian's npm only
# fetches them; idempotent.
codecage_install_mcp_clients() {
        codecage_ensure_npm "the MCP test clients"
        "$(dirname "${BASH_SOURCE[0]}")/../tests/mcp/install.sh"
}

# E2B: the pinned E2B SDKs that tests/e2b/run.mjs drives (tests/e2b/package-lock.json:
# e2b 2.51.0, 2.50.0, 2.45.0, @e2b/code-interpreter 2.8.0 and Node 22, into
# tests/e2b/node_modules). Debian's npm only fetches them; idempotent.
codecage_install_e2b_sdks() {
        codecage_ensure_npm "the E2B SDKs"
        "$(dirname "${BASH_SOURCE[0]}")/../tests/e2b/install.sh"
}

# codecage_ensure_npm WHAT: Debian's npm, installed when missing (as root).
codecage_ensure_npm() {
        if ! command -v npm >/dev/null; then
                if [ "$(id -u)" != 0 ]; then
                        echo "codecage: run as root (or install npm) for $1" >&2
                        return 1
                fi
                DEBIAN_FRONTEND=noninteractive apt-get update -q
                DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends npm
        fi
}
