"""pip `requirements` of runs and sandboxes: installed from the configured
index before the code runs, in a separate sandbox that may reach only the
index, into a layer cached by (requirement set, interpreter, index) and
mounted read-only into the run's sandbox.

The index is a local PEP 503 index (tests/netlib.py SimpleIndex) serving
wheels built by the test, at http://pypi.test:PORT/simple: pypi.test
resolves to 127.0.0.1 through the server's own /etc/hosts, and the config
allows 127.0.0.1 (network.allow_private). The index counts downloads, which
is how "cached" and "installed once" are checked."""
import os
import threading

import pytest

import netlib

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's sandboxes need root")

# An install from the local index takes about a second; a request still
# unanswered after this is a hang (bounded, so a hang fails in a minute).
INSTALL_TIMEOUT = 60
PACKAGES = ["cagealpha", "cagebeta", "cagegamma", "cagedelta", "cageeps", "cagezeta", "cageeta",
            "cagetheta"]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    wheels = tmp_path_factory.mktemp("wheels")
    idx = netlib.SimpleIndex([netlib.build_wheel(wheels, p, "1.0") for p in PACKAGES])
    yield idx
    idx.close()


def req_server(world, index, tmp):
    return world.server(tmp, allow=[*world.server_allow(), f"pypi.test:{index.port}"],
                        pip={"index_url": index.url("pypi.test"), "timeout_s": 120})


@pytest.fixture(scope="module")
def server(world, index, tmp_path_factory):
    s = req_server(world, index, tmp_path_factory.mktemp("req-server"))
    yield s
    s.stop()


@pytest.fixture
def own_server(world, index, tmp_path):
    """A server of the test's own (a fresh layer cache)."""
    s = req_server(world, index, tmp_path)
    yield s
    s.stop()


def python(server, code, requirements, **body):
    r = server.request("POST", "/v1/python", {"code": code, "requirements": requirements,
                                              "timeout_s": 60, **body}, timeout=INSTALL_TIMEOUT)
    assert r.status == 200, (r.status, r.body)
    return r.json


def shell(server, command, requirements, **body):
    r = server.request("POST", "/v1/run", {"command": command, "requirements": requirements,
                                           "timeout_s": 60, **body}, timeout=INSTALL_TIMEOUT)
    assert r.status == 200, (r.status, r.body)
    return r.json


def check_requirements_field(result):
    req = result.get("requirements")
    assert isinstance(req, dict), result
    assert isinstance(req["cached"], bool), req
    assert isinstance(req["duration_ms"], int) and req["duration_ms"] >= 0, req
    return req


def test_the_index_fixture_works_with_the_hosts_pip(tmp_path):
    """The fixture itself (no codecage): the host's pip installs from it."""
    idx = netlib.SimpleIndex([netlib.build_wheel(tmp_path / "w", "cageselfcheck", "1.0")])
    try:
        p = netlib.host_pip_install(idx.url(), "127.0.0.1", "cageselfcheck==1.0", tmp_path / "t")
        assert p.returncode == 0, p.stdout + p.stderr
        assert (tmp_path / "t" / "cageselfcheck" / "__init__.py").exists()
        assert idx.download_count("cageselfcheck") == 1
    finally:
        idx.close()


def test_install_import_and_cache_in_run_python(server, index):
    code = "import cagealpha\ncagealpha.VALUE"
    first = python(server, code, ["cagealpha==1.0"])
    assert first["status"] == "ok", first
    assert first["return_value"] == "cagealpha-1.0", first
    r1 = check_requirements_field(first)
    assert r1["cached"] is False, r1
    assert index.download_count("cagealpha") == 1, index.downloads
    second = python(server, code, ["cagealpha==1.0"])
    assert second["return_value"] == "cagealpha-1.0", second
    r2 = check_requirements_field(second)
    assert r2["cached"] is True, r2
    assert index.download_count("cagealpha") == 1, "the cached layer was downloaded again"
    # the install's traffic went through the egress proxy and was audited
    recs = netlib.wait_until(lambda: netlib.audit_network(server, event="network.allow",
                                                        host="pypi.test"))
    assert recs and all(x["port"] == index.port for x in recs), netlib.audit_network(server)
    print(f"\nrequirements: install {r1['duration_ms']} ms, cached {r2['duration_ms']} ms "
          f"(run {first['duration_ms']} / {second['duration_ms']} ms)")


def test_install_and_import_in_a_shell_run(server, index):
    r = shell(server, "python3 -c 'import cagebeta; print(cagebeta.VALUE)'", ["cagebeta==1.0"])
    assert r["status"] == "ok" and r["stdout"] == "cagebeta-1.0\n", r
    assert check_requirements_field(r)["cached"] is False
    # the same set, interpreter and index: the same layer, from a Python run too
    p = python(server, "import cagebeta\ncagebeta.VALUE", ["cagebeta==1.0"])
    assert p["return_value"] == "cagebeta-1.0", p
    assert check_requirements_field(p)["cached"] is True, p
    assert index.download_count("cagebeta") == 1


def test_the_layer_is_read_only(server):
    code = ("import cagealpha, os, pathlib\n"
            "d = pathlib.Path(cagealpha.__file__).parent\n"
            "try:\n    (d / 'planted.py').write_text('x = 1')\n    out = 'written'\n"
            "except OSError as e:\n    out = type(e).__name__\n"
            "out")
    r = python(server, code, ["cagealpha==1.0"])
    assert r["status"] == "ok" and r["return_value"] in ("OSError", "PermissionError"), r


def test_requirements_of_a_named_sandbox(server, index):
    name = "req" + os.urandom(4).hex()
    r = server.request("POST", "/v1/sandboxes", {"name": name, "requirements": ["cageeps==1.0"]},
                       timeout=INSTALL_TIMEOUT)
    assert r.status == 201, (r.status, r.body)
    try:
        ex = server.ok("POST", f"/v1/sandboxes/{name}/exec",
                       {"script": "python3 -c 'import cageeps; print(cageeps.VALUE)'"})
        assert ex["stdout"] == "cageeps-1.0\n", ex
        py = server.ok("POST", f"/v1/sandboxes/{name}/python", {"code": "import cageeps\ncageeps.VALUE"})
        assert py["return_value"] == "cageeps-1.0", py
        # still there after a stop and start
        server.ok("POST", f"/v1/sandboxes/{name}/stop")
        ex = server.ok("POST", f"/v1/sandboxes/{name}/exec",
                       {"script": "python3 -c 'import cageeps; print(cageeps.VALUE)'"})
        assert ex["stdout"] == "cageeps-1.0\n", ex
        assert index.download_count("cageeps") == 1
    finally:
        server.request("DELETE", f"/v1/sandboxes/{name}")


@pytest.mark.parametrize("route", ["/v1/python", "/v1/run"])
def test_a_failing_install_is_an_error_result_with_pips_message(server, route):
    body = {"requirements": ["cagenonexistent==1.0"], "timeout_s": 60}
    if route == "/v1/python":
        body["code"] = "print('RAN')"
    else:
        body["command"] = "echo RAN"
    r = server.request("POST", route, body, timeout=INSTALL_TIMEOUT)
    assert r.status == 200, (r.status, r.body)
    res = r.json
    assert res["status"] == "error", res
    assert "RAN" not in res["stdout"], "the code ran although its requirements failed"
    assert "cagenonexistent" in res["stderr"], res["stderr"]
    assert "No matching distribution" in res["stderr"], res["stderr"]


def test_a_failure_is_not_cached(server, index):
    """A set that failed is tried again next time (the index may have been
    fixed in between)."""
    for _ in range(2):
        r = python(server, "1", ["cagealpha==1.0", "cagenonexistent2"])
        assert r["status"] == "error", r
    hits = [q for q in index.requests if "cagenonexistent2" in q["path"]]
    assert len(hits) >= 2, index.requests


def test_concurrent_identical_requests_install_once(own_server, index):
    server = own_server
    results = [None] * 4

    def one(i):
        try:
            results[i] = python(server, "import cagegamma\ncagegamma.VALUE", ["cagegamma==1.0"])
        except Exception as e:  # a hang shows as a socket timeout here
            results[i] = {"exception": repr(e)}

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(INSTALL_TIMEOUT + 10)
    assert all(r and r.get("return_value") == "cagegamma-1.0" for r in results), results
    assert index.download_count("cagegamma") == 1, index.downloads
    assert sum(not r["requirements"]["cached"] for r in results) >= 1, results


def test_the_users_code_does_not_get_the_index(server, world, index):
    """The install sandbox may reach the index; the run's own code has the
    run's network policy: none here."""
    m = netlib.marker()
    code = ("import os, urllib.request\n"
            "try:\n"
            f"    urllib.request.urlopen('http://pypi.test:{index.port}/simple/?{m}', timeout=5)\n"
            "    out = 'reached'\n"
            "except Exception as e:\n"
            "    out = type(e).__name__\n"
            "[out, sorted(k for k in os.environ if 'proxy' in k.lower())]")
    r = python(server, code, ["cagedelta==1.0"])
    assert r["status"] == "ok", r
    assert r["return_value"][0] != "reached" and r["return_value"][1] == [], r
    # with a network list of its own, the index is not on it
    code = ("import urllib.request, urllib.error\n"
            "try:\n"
            f"    urllib.request.urlopen('http://pypi.test:{index.port}/simple/?{m}', timeout=5)\n"
            "    out = 'reached'\n"
            "except urllib.error.HTTPError as e:\n"
            "    out = [e.code, e.read().decode()]\n"
            "out")
    r = python(server, code, ["cagedelta==1.0"], network=[f"allowed.test:{world.P}"])
    assert r["return_value"][0] == 403 and "pypi.test" in r["return_value"][1], r
    assert [q for q in index.requests if m in q["path"]] == []


def test_requirements_are_validated(server):
    for bad, why in [(["x"] * 65, "65 entries"), ([1], "a number"), ("cagealpha", "not a list")]:
        r = server.request("POST", "/v1/python", {"code": "1", "requirements": bad})
        assert r.status == 400, (why, r.status, r.body)
        assert "requirements" in r.json["error"]["message"], (why, r.body)


def test_option_like_requirements_cannot_steer_pip(server, world, index):
    """An entry that looks like a pip option (another index, a local path,
    a URL) must be refused, or at least reach nothing but the index."""
    m = netlib.marker()
    other = f"http://other.test:{world.P}/simple/?{m}"
    for bad in [f"--index-url={other}", f"--extra-index-url={other}", "-r/etc/shadow",
                f"cagealpha @ http://other.test:{world.P}/x.whl?{m}", "-e/etc"]:
        r = server.request("POST", "/v1/python", {"code": "print('RAN')", "requirements": [bad]},
                           timeout=INSTALL_TIMEOUT)
        assert r.status in (200, 400, 403), (bad, r.status, r.body)
        if r.status == 200:
            assert r.json["status"] == "error", (bad, r.json)
    assert world.http.matching(m) == []


def test_mcp_run_python_with_requirements(server):
    res = netlib.mcp_call(server, "run_python", {"code": "import cagezeta\ncagezeta.VALUE",
                                                 "requirements": ["cagezeta==1.0"]})
    assert not res.get("isError"), res
    assert res["structuredContent"]["return_value"] == "cagezeta-1.0", res
    assert res["structuredContent"]["requirements"]["cached"] is False, res


def test_an_index_on_the_hosts_loopback_address(world, index, tmp_path):
    """An index named by IP (a mirror on the host, http://127.0.0.1:PORT):
    inside the install sandbox 127.0.0.1 is its own loopback, so the install
    must still go through the proxy (no NO_PROXY there), which reaches the
    host's address because allow_private holds it."""
    s = world.server(tmp_path, allow=world.server_allow(),
                     pip={"index_url": index.url("127.0.0.1"), "timeout_s": 120})
    try:
        r = python(s, "import cagetheta\ncagetheta.VALUE", ["cagetheta==1.0"])
        assert r["status"] == "ok", r
        assert r["return_value"] == "cagetheta-1.0", r
    finally:
        s.stop()
