#!/usr/bin/python3
"""A session round trip through `codecage mcp` (stdio) with a raw JSON-RPC
client, against the floor: a python3 REPL loop over pipes (one process
reading lines, eval'ing them, writing the answer), both driven from this
process, interleaved in blocks.

  floor     write "x + 1\\n" to python3, read its line
  mcp       tools/call run_python {"code": "x + 1", "sandbox": "rt"}, read
            the answer line (revision 2025-06-18, in the initialized session)
  mcp 2026  the same call of revision 2026-07-28: stateless, its _meta in the
            request; it runs as a job on a thread of its own (mcp_job.c)

Usage (root): sudo bench/mcp_roundtrip.py [--rounds 2000] [--build build]
Not a test: numbers are printed.
"""
import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

FLOOR = ("import sys\nx = 1\nfor l in sys.stdin:\n"
         "    sys.stdout.write(repr(eval(l)) + '\\n'); sys.stdout.flush()\n")


class Mcp:
    def __init__(self, binary, cfg):
        self.p = subprocess.Popen([binary, "mcp", "--config", cfg], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
        # bufsize=0 keeps each request one write; the answers are read
        # buffered (a raw pipe's readline reads one byte per system call).
        self.out = io.BufferedReader(self.p.stdout)
        self.next = 1
        self.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": "bench", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, msg):
        self.p.stdin.write(json.dumps(msg).encode() + b"\n")

    def rpc(self, method, params):
        i = self.next
        self.next += 1
        self.send({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
        while True:
            msg = json.loads(self.out.readline())
            if msg.get("id") == i:
                return msg

    def line(self):
        return self.out.readline()

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    data = tempfile.mkdtemp(prefix="codecage-mcprt-")
    cfgp = os.path.join(data, "config.json")
    with open(cfgp, "w") as f:
        json.dump({"data_dir": data, "listen": {"http": None, "unix": os.path.join(data, "s.sock")},
                   "pool_size": 0}, f)
    m = Mcp(os.path.join(a.build, "codecage"), cfgp)
    r = m.rpc("tools/call", {"name": "sandbox_create", "arguments": {"name": "rt", "memory_mib": 64}})
    assert "result" in r and not r["result"].get("isError"), r
    r = m.rpc("tools/call", {"name": "run_python", "arguments": {"code": "x = 1", "sandbox": "rt"}})
    assert not r["result"].get("isError"), r
    floor = subprocess.Popen(["/usr/bin/python3", "-S", "-c", FLOOR], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, bufsize=0)
    floor_out = io.BufferedReader(floor.stdout)
    call = {"jsonrpc": "2.0", "method": "tools/call",
            "params": {"name": "run_python", "arguments": {"code": "x + 1", "sandbox": "rt"}}}
    call26 = {"jsonrpc": "2.0", "method": "tools/call",
              "params": {"name": "run_python", "arguments": {"code": "x + 1", "sandbox": "rt"},
                         "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                   "io.modelcontextprotocol/clientCapabilities": {}}}}
    t_floor, t_mcp, t_mcp26 = [], [], []
    block = 20
    for b in range(a.rounds // block):
        for _ in range(block):
            t = time.perf_counter()
            floor.stdin.write(b"x + 1\n")
            floor_out.readline()
            t_floor.append((time.perf_counter() - t) * 1e3)
        for _ in range(block):
            call["id"] = m.next
            m.next += 1
            data_out = json.dumps(call).encode() + b"\n"
            t = time.perf_counter()
            m.p.stdin.write(data_out)
            line = m.line()
            t_mcp.append((time.perf_counter() - t) * 1e3)
        assert b'"isError":false' in line or b'"isError": false' in line, line
        for _ in range(block):
            call26["id"] = m.next
            m.next += 1
            data_out = json.dumps(call26).encode() + b"\n"
            t = time.perf_counter()
            m.p.stdin.write(data_out)
            line = m.line()
            t_mcp26.append((time.perf_counter() - t) * 1e3)
        assert b'"resultType":"complete"' in line and b'"isError":false' in line, line
    floor.stdin.close()
    floor.wait()
    m.rpc("tools/call", {"name": "sandbox_remove", "arguments": {"name": "rt"}})
    m.close()
    shutil.rmtree(data, ignore_errors=True)
    n = len(t_mcp)
    fm, mm, m26 = statistics.median(t_floor), statistics.median(t_mcp), statistics.median(t_mcp26)
    print(f"session round trip x + 1 ({n} rounds, interleaved in blocks of {block}):")
    print(f"  floor: python3 eval loop over pipes  median {fm:.3f} ms  p90 {pct(t_floor, .9):.3f} ms")
    print(f"  codecage mcp, run_python in session   median {mm:.3f} ms  p90 {pct(t_mcp, .9):.3f} ms")
    print(f"  codecage mcp, the same call, 2026-07-28 median {m26:.3f} ms  p90 {pct(t_mcp26, .9):.3f} ms")
    print(f"  over the floor: {mm - fm:.3f} ms (bar: <= 0.15 ms); 2026-07-28 over 2025: "
          f"{m26 - mm:.3f} ms ({m26 / mm:.2f}x)")


if __name__ == "__main__":
    main()
