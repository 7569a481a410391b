#!/bin/bash
# npm ci DIR...: installs each DIR's package-lock.json into DIR/node_modules
# exactly as it pins it, unless the installed tree matches the lock file
# already (a stamp, node_modules/.codecage-lock, is its copy). Install
# scripts are not run. Used by tests/mcp/install.sh and tests/e2b/install.sh.
set -euo pipefail
for dir in "$@"; do
        (
                cd "$dir"
                stamp=node_modules/.codecage-lock
                if [ -f "$stamp" ] && cmp -s package-lock.json "$stamp"; then
                        exit 0
                fi
                if ! command -v npm >/dev/null; then
                        echo "codecage: npm is missing: apt-get install npm (or run scripts/deps.sh as root)" >&2
                        exit 1
                fi
                echo "codecage: npm ci in $dir" >&2
                npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
                cp package-lock.json "$stamp"
        )
done
