"""The warm pool's zygote: pooled one-shot Python runs are served by sandboxes
forked from a template interpreter, and their results are those of a
sandbox started the usual way (a policy no pool serves starts one cold):
output, errors, return values, a lost session, timeouts, output limits, OOM,
files in and artifacts out."""
import concurrent.futures
import os

import pytest

from conftest import DEBUG_BUILD, wait_until
from serverlib import Server

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's workspaces need root")

MEMORY_MIB = 128
CONFIG = {"defaults": {"memory_mib": MEMORY_MIB}, "pool_size": 2}
COLD = {"memory_mib": MEMORY_MIB // 2}  # a policy the pool does not serve
# Fields of the result contract that do not depend on timing.
SAME = ("status", "stdout", "stderr", "exit_code", "signal", "truncated", "state_lost",
        "return_value", "return_repr", "host_calls", "limits_backend")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("zygote"), extra=CONFIG)
    yield s
    s.stop()


def pool(server):
    return server.ok("GET", "/v1/pool")


def wait_forking(server):
    ok = wait_until(lambda: pool(server)["zygote"] and pool(server)["ready"] >= 1, timeout=60)
    assert ok, f"the pool does not fork from a zygote: {pool(server)}"


def oneshot(server, code, **extra):
    r = server.request("POST", "/v1/python", {"code": code, **extra}, timeout=120)
    assert r.status == 200, r.body
    return r.json


def pooled_and_cold(server, code, **extra):
    wait_forking(server)
    pooled = oneshot(server, code, **extra)
    cold = oneshot(server, code, **extra, **COLD)
    assert pooled["pooled"] is True and cold["pooled"] is False, (pooled, cold)
    return pooled, cold


def assert_same(pooled, cold, fields=SAME):
    for f in fields:
        assert pooled.get(f) == cold.get(f), (f, pooled, cold)
    perr, cerr = pooled.get("error"), cold.get("error")
    assert (perr is None) == (cerr is None), (pooled, cold)
    if perr:
        assert (perr["type"], perr["message"]) == (cerr["type"], cerr["message"])


def test_the_pool_forks_its_sandboxes(server):
    wait_forking(server)
    before = pool(server)
    res = oneshot(server, "import os\nprint(os.getpid(), os.getuid())")
    assert res["pooled"] is True and res["status"] == "ok", res
    # The driver runs as the sandbox user beneath its own init, as always.
    assert res["stdout"] == "2 1000\n", res
    after = pool(server)
    assert after["hits"] == before["hits"] + 1 and after["zygote"] is True
    assert "zygote_error" not in after


@pytest.mark.parametrize("code", [
    "print('out')\nimport sys\nprint('err', file=sys.stderr)",
    "x = {'a': [1, 2.5, None]}\nx",
    "raise ValueError('boom')",
    "import os\nos.write(1, b'fd level\\n')\nos._exit(3)",
    "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
    "import subprocess\nprint(subprocess.run(['/bin/echo', 'child'], capture_output=True).stdout)",
    "import os\nsorted(os.listdir('/workspace')), os.getcwd(), os.environ['HOME']",
    "import socket\nsocket.gethostname()",
    # Its own session, a /proc/self it may read, and the environment a
    # program it starts inherits.
    "import os\nos.getsid(0) == os.getpid(), len(open('/proc/self/auxv', 'rb').read()) > 0",
    "import subprocess\nsorted(subprocess.run(['/usr/bin/env'], capture_output=True, text=True)"
    ".stdout.split())",
])
def test_results_are_those_of_a_cold_sandbox(server, code):
    pooled, cold = pooled_and_cold(server, code)
    assert_same(pooled, cold)


def test_no_signal_is_blocked_in_a_pooled_sandbox(server):
    # The template blocks SIGCHLD for its own loop; the user's code must not
    # inherit that (a handler or a child watcher of its own would never run).
    code = "import re\nre.search(r'SigBlk:\\s*(\\S+)', open('/proc/self/status').read())[1]"
    pooled, cold = pooled_and_cold(server, code)
    assert pooled["return_value"] == cold["return_value"] == "0000000000000000", (pooled, cold)


def test_timeout_interrupts_a_pooled_run(server):
    pooled, cold = pooled_and_cold(server, "import time\ntime.sleep(30)", timeout_s=1)
    assert pooled["status"] == "timeout", pooled
    assert_same(pooled, cold, ("status", "reason", "state_lost"))


def test_output_limit_stops_a_pooled_run(server):
    pooled, cold = pooled_and_cold(server, "while True:\n    print('x' * 4096)",
                                   output_max_bytes=65536)
    assert pooled["status"] == cold["status"] == "output_limit", (pooled, cold)


def test_oom_in_a_pooled_run(server):
    pooled, cold = pooled_and_cold(server, f"b = bytearray({4 * MEMORY_MIB} << 20)")
    assert pooled["status"] == cold["status"] == "oom", (pooled, cold)
    assert pooled["state_lost"] is True


def test_files_in_and_artifacts_out(server):
    code = ("data = open('/workspace/in.txt').read()\n"
            "open('/workspace/output/out.txt', 'w').write(data.upper())\n"
            "data")
    files = [{"path": "in.txt", "content": "hello"}]
    pooled, cold = pooled_and_cold(server, code, files=files)
    assert pooled["return_value"] == "hello", pooled
    assert [a["path"] for a in pooled["artifacts"]] == [a["path"] for a in cold["artifacts"]]
    assert [a["path"] for a in pooled["artifacts"]] == ["output/out.txt"], pooled


def test_runs_at_once_each_get_a_fork(server):
    wait_forking(server)
    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        results = list(ex.map(lambda i: oneshot(server, f"{i} * 2"), range(12)))
    assert [r["return_value"] for r in results] == [i * 2 for i in range(12)]
    # More runs than the pool holds: they wait for the next fork, none starts cold.
    assert all(r["pooled"] for r in results), results


@pytest.mark.skipif(not (DEBUG_BUILD / "codecage").exists(), reason="needs the unsafe build")
def test_a_python_that_cannot_host_a_zygote_falls_back(tmp_path):
    # The unsafe build's template answers as a Python without ctypes does.
    s = Server(tmp_path, extra=CONFIG, build=DEBUG_BUILD,
               env=dict(os.environ, CODECAGE_DEBUG_DISABLE="zygote-python"))
    try:
        assert wait_until(lambda: pool(s)["ready"] >= 1, timeout=60), pool(s)
        stats = pool(s)
        assert stats["zygote"] is False, stats
        assert "cannot host" in stats["zygote_error"], stats
        res = oneshot(s, "print(1)")
        assert res["pooled"] is True and res["stdout"] == "1\n", res
    finally:
        s.stop()
