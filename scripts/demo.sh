#!/bin/bash
# Sets codecage up on a fresh Debian 12 machine (as root) and shows what it
# does: one-shot sandboxes (output, result contract, isolation, limits),
# then the server: named sandboxes with persistent workspaces, Python
# sessions and one-shot runs through the HTTP API and the CLI client.
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

# The server, on a throwaway data directory.
demo=$(mktemp -d /tmp/codecage-demo.XXXXXX)
sock=$demo/codecage.sock
printf '{"data_dir": "%s/data", "listen": {"unix": "%s"}, "pool_size": 1}\n' "$demo" "$sock" \
        >"$demo/config.json"
$cage serve --config "$demo/config.json" 2>"$demo/serve.log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$demo"' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
api() {
        printf '\n$ curl --unix-socket codecage.sock localhost%s %s\n' "$2" "${3:-}"
        curl -s --unix-socket "$sock" -X "$1" "localhost$2" -H 'Content-Type: application/json' \
                ${3:+-d "$3"}
        echo
}
cli() {
        printf '\n$ codecage sandbox %s\n' "$*"
        $cage sandbox --socket "$sock" "$@" || true
}
cli create demo --memory 256 --label purpose=demo
cli exec demo -- python3 -c 'open("notes.txt", "w").write("kept across restarts\n")'
cli stop demo
cli shell demo 'cat notes.txt; echo "pid 1 is: $(cat /proc/1/comm)"'
cli ls
api POST /v1/sandboxes/demo/python '{"code": "x = 41"}'
api POST /v1/sandboxes/demo/python '{"code": "x + 1"}'
api POST /v1/python '{"code": "import os\nos.makedirs(\"output\", exist_ok=True)\nopen(\"output/hi.txt\", \"w\").write(\"hi\")\nprint(\"made an artifact\")"}'
api POST /v1/run '{"command": "echo one-shot; cat /etc/shadow"}'
cli rm demo

# MCP over stdio, as an agent's client speaks it (docs/MCP.md).
printf '{"data_dir": "%s/mcp-data", "pool_size": 1}\n' "$demo" >"$demo/mcp.json"
printf '\n$ codecage mcp   # initialize, then tools/call run_python\n'
printf '%s\n' \
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"demo","version":"1"}}}' \
        '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
        '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"import platform\nprint(platform.python_version())\n6 * 7"}}}' |
        $cage mcp --config "$demo/mcp.json" 2>/dev/null | tail -n 1 | cut -c 1-600
echo
