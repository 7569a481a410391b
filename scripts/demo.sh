#!/bin/bash
# Sets codecage up on a fresh Debian 12 machine (as root) and shows what a
# one-shot sandbox does: output and result contract, isolation, limits.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
codecage_install_deps
codecage_build build

cage=./build/codecage
show() {
        printf '\n$ %s\n' "$*"
        "$@" || true
}
show $cage doctor
show $cage run -- /usr/bin/python3 -c 'print("hello from a sandbox")'
show $cage run --json -- /usr/bin/python3 -c 'import os; print(os.getuid(), sorted(os.listdir("/etc")))'
show $cage run --json --memory 64 -- /usr/bin/python3 -c 'b = bytearray(512 << 20)'
show $cage run --json --timeout 1 -- /bin/sh -c 'while :; do :; done'
show $cage run --json --output-max 200 -- /usr/bin/seq 100000
show $cage run -- /bin/sh -c 'cat /etc/shadow; ls /root; echo "still here: the sandbox cannot see them"'
