"""The codecage Python client (clients/python) against a real `codecage
serve`: the seed surface async and blocking, over TCP with a token and over
the Unix socket; files and artifacts; streaming; Python sessions; host
functions with real callbacks; typed errors; a server restart; 50 runs at once."""
import asyncio
import json
import os
import time

import pytest

import serverlib
from clientlib import (TOKEN, aclient, codecage_pkg, name, sclient, server,  # noqa: F401
                       url)


# a 1x1 PNG
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
                    "0000000d4944415478da63f8cfc0f01f0005000201a0cd1c8e0000000049454e44ae426082")


def arun(coro):
    return asyncio.run(coro)


# ---- the seed surface ---------------------------------------------------------


def test_lifecycle_async(codecage_pkg, aclient, name):
    cc = codecage_pkg

    async def main():
        async with aclient as c:
            h = await c.create(cc.SandboxSpec(name, memory_mib=256, cpus=0.5,
                                              labels={"team": "py"}, egress=()))
            assert isinstance(h, cc.SandboxHandle) and h.name == name
            assert h.last_info["spec"]["memory_mib"] == 256
            assert name in await c.list()
            assert name in await c.list(label="team=py")
            assert name not in await c.list(label="team=other")
            r = await h.exec("/bin/echo", ["a b", "$HOME"])  # argv: no shell
            assert isinstance(r, cc.ExecResult)
            assert (r.stdout, r.exit_code, r.ok, r.status) == ("a b $HOME\n", 0, True, "ok")
            r = await h.shell("echo out; echo err >&2; exit 3")
            assert (r.stdout, r.stderr, r.exit_code, r.ok) == ("out\n", "err\n", 3, False)
            assert r.output == "out\nerr\n" and r.duration_ms >= 0 and r.artifacts == ()
            r = await h.shell("sleep 5", timeout=0.3)
            assert r.status == "timeout" and not r.ok
            logs = await h.logs()
            assert "a b $HOME" in logs and "out" in logs
            assert (await h.logs(tail=1)).count("\n") == 0
            g = await c.get(name)
            assert g.name == name and g.last_info["state"] == "running"
            await g.stop()
            assert g.last_info["state"] == "stopped"
            r = await h.shell("echo again")  # an exec starts a stopped sandbox again
            assert r.stdout == "again\n" and r.restarted
            await h.kill()
            assert (await h.info())["state"] == "stopped"
            await c.remove(name)
            assert name not in await c.list()
            with pytest.raises(cc.NotFound):
                await c.get(name)

    arun(main())


def test_lifecycle_sync(codecage_pkg, sclient, name):
    cc = codecage_pkg
    h = sclient.create(cc.SandboxSpec(name))
    try:
        assert isinstance(h, cc.sync.SandboxHandle)
        assert sclient.get(name).name == name and name in sclient.list()
        r = h.exec("sh", ["-c", "echo $0", "x"])
        assert r.stdout == "x\n" and r.ok
        assert h.shell("exit 7").exit_code == 7
        h.stop()
        h.kill()
        assert "x" in h.logs()
    finally:
        sclient.remove(name)
    assert name not in sclient.list()


def test_one_shot_runs_use_the_one_shot_endpoints(codecage_pkg, sclient, server):
    before = set(sclient.list())
    r = sclient.run_python("import sys\nprint(6*7)\nsys.version_info[0]")
    assert r.stdout == "42\n" and r.return_value == 3 and r.ok and r.status == "ok"
    assert r.run_id and r.pooled is not None  # only /v1/python answers these
    r = sclient.run_python("raise ValueError('boom')")
    assert not r.ok and r.status == "error"
    assert r.error.type == "ValueError" and r.error.message == "boom"
    assert "<cell-" in r.error.traceback
    r = sclient.run_shell("echo $((6*7)); exit 4")
    assert (r.stdout, r.exit_code, r.ok) == ("42\n", 4, False) and r.run_id
    r = sclient.run("/bin/echo", ["$x"], env={"x": "1"})
    assert r.stdout == "$x\n" and r.ok
    r = sclient.run_shell("echo $MODE; cat in.txt", env={"MODE": "m"}, files={"in.txt": "data"})
    assert r.stdout == "m\ndata" and r.ok
    assert set(sclient.list()) == before  # no named sandbox was made


def test_ok_falls_back_to_status_without_exit_code(codecage_pkg):
    R = codecage_pkg.ExecResult
    assert R.from_api({"status": "ok", "exit_code": None}).ok
    assert not R.from_api({"status": "error", "exit_code": None}).ok
    assert not R.from_api({"status": "ok", "exit_code": 1}).ok
    assert R.from_api({"status": "ok", "exit_code": 0}).ok
    r = R.from_api({"status": "output_limit", "exit_code": 0, "stdout": "x",
                    "truncated": {"stdout": {"kept": 1, "total": 9}}})
    assert r.truncated is True and r.truncation["stdout"]["total"] == 9


def test_pooled_run(codecage_pkg, sclient, server):
    deadline = time.monotonic() + 20
    while sclient.pool()["ready"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    hits = sclient.pool()["hits"]
    r = sclient.run_python("print('pooled')")
    assert r.pooled is True and r.stdout == "pooled\n"
    assert sclient.pool()["hits"] == hits + 1


# ---- files and artifacts ------------------------------------------------------


def test_files(codecage_pkg, sclient, name, tmp_path):
    cc = codecage_pkg
    h = sclient.create(name)
    try:
        assert h.write_file("d/a.txt", "héllo") == 6
        assert h.read_file("d/a.txt") == "héllo".encode() and h.read_text("d/a.txt") == "héllo"
        blob = bytes(range(256)) * 10
        h.write_file("d/b+c.bin", blob)  # '+' and odd bytes go through quoting
        assert h.read_file("d/b+c.bin") == blob
        big = os.urandom(3 << 20)  # sent after the server's "100 Continue"
        assert h.write_file("big.bin", big) == len(big) and h.read_file("big.bin") == big
        h.remove_file("big.bin")
        names = {e.name: e for e in h.list_files("d")}
        assert set(names) == {"a.txt", "b+c.bin"} and names["b+c.bin"].size == 2560
        assert names["a.txt"].type == "file"
        st = h.stat("d/a.txt")
        assert st.size == 6 and st.mime == "text/plain"
        h.mkdir("e/f")
        assert any(e.name == "e" and e.type == "dir" for e in h.list_files())
        src = tmp_path / "up.csv"
        src.write_text("a,b\n1,2\n")
        assert h.upload(src, "in/up.csv") == 8
        assert h.shell("cat in/up.csv").stdout == "a,b\n1,2\n"
        assert h.download("in/up.csv", tmp_path / "down.csv") == 8
        assert (tmp_path / "down.csv").read_text() == "a,b\n1,2\n"
        h.remove_file("d/a.txt")
        with pytest.raises(cc.NotFound):
            h.read_file("d/a.txt")
        h.remove_file("e", recursive=True)
        assert not any(e.name == "e" for e in h.list_files())
        with pytest.raises(cc.InvalidRequest):
            h.read_file("../etc/passwd")
        # artifacts of an exec, with their mime types
        h.write_file("p.png", PNG)
        r = h.shell("printf '{\"x\": 1}' > output/r.json; cp p.png output/p.png")
        arts = {a.name: a for a in r.artifacts}
        assert arts["r.json"].mime == "application/json" and arts["r.json"].size == 8
        assert arts["p.png"].mime == "image/png"
        assert h.artifact(arts["r.json"]) == b'{"x": 1}'
    finally:
        sclient.remove(name)


def test_one_shot_artifacts(codecage_pkg, sclient):
    r = sclient.run_python("open('output/o.txt','w').write('art')",
                           files={"in.bin": b"\x00\x01"})
    assert r.ok and [a.path for a in r.artifacts] == ["output/o.txt"]
    assert r.artifacts[0].mime == "text/plain"
    assert sclient.artifact(r, r.artifacts[0]) == b"art"
    assert sclient.artifact(r.run_id, "o.txt") == b"art"
    r = sclient.run_python("open('in.bin','rb').read()")
    with pytest.raises(codecage_pkg.NotFound):
        sclient.artifact("0" * 32, "o.txt")


# ---- streaming ----------------------------------------------------------------


def test_streaming_async(codecage_pkg, aclient, name):
    async def main():
        async with aclient as c:
            h = await c.create(name)
            try:
                seen = []
                t0 = time.monotonic()
                async for ev in h.shell_stream("echo one; sleep 2; echo two >&2"):
                    seen.append((ev.kind, ev.text, round(time.monotonic() - t0, 1)))
                    if ev.kind == "result":
                        result = ev.result
                kinds = [(k, t) for k, t, _ in seen]
                assert kinds == [("stdout", "one\n"), ("stderr", "two\n"), ("result", "")]
                assert seen[1][2] - seen[0][2] >= 1.0  # "one" came before the sleep ended
                assert result.stdout == "one\n" and result.ok
                # leaving the loop early cancels the run on the server
                async for ev in h.shell_stream("echo start; sleep 1.5; touch late"):
                    assert ev.kind == "stdout"
                    break
                await asyncio.sleep(2.5)
                assert (await h.shell("ls late")).exit_code != 0
                evs = [ev async for ev in h.exec_stream("/bin/echo", ["x"])]
                assert evs[-1].result.stdout == "x\n"
                evs = [ev async for ev in c.run_python_stream("print(1)\nprint(2)")]
                assert "".join(e.text for e in evs if e.kind == "stdout") == "1\n2\n"
                assert evs[-1].result.ok
                evs = [ev async for ev in c.run_shell_stream("echo sh")]
                assert evs[-1].result.stdout == "sh\n"
            finally:
                await c.remove(name)

    arun(main())


def test_streaming_sync(sclient, name):
    h = sclient.create(name)
    try:
        evs = list(h.shell_stream("echo a; echo b"))
        assert "".join(e.text for e in evs if e.kind == "stdout") == "a\nb\n"
        assert evs[-1].kind == "result" and evs[-1].result.ok
        evs = list(h.session().run_stream("for i in range(3): print(i)"))
        assert evs[-1].result.stdout == "0\n1\n2\n"
        for ev in h.shell_stream("echo start; sleep 1.5; touch late"):
            break  # closes the stream: the run is cancelled
        time.sleep(2.5)
        assert h.shell("ls late").exit_code != 0
    finally:
        sclient.remove(name)


# ---- Python sessions ----------------------------------------------------------


def test_python_session(codecage_pkg, sclient, name):
    cc = codecage_pkg
    h = sclient.create(name)
    try:
        s = h.session()
        assert s.run("import math\nx = 2").ok
        r = s.run("math.sqrt(x * 8)")
        assert r.return_value == 4.0 and r.ok
        s.set_variable("cfg", {"k": [1, 2]})
        s.set_variable("n", 5)
        s.set_context("a long text " * 1000)
        s.set_context("other", name="doc")
        assert s.run("cfg['k'][1] + n + len(context) + len(doc)").return_value == 2 + 5 + 12000 + 5
        assert s.get_variable("cfg") == {"k": [1, 2]}
        assert set(s.list_variables()) >= {"x", "cfg", "n", "context", "doc"}
        assert "math" not in s.list_variables()
        info = {v.name: v for v in s.variables()}
        assert info["context"].type == "str" and info["context"].size == 12000
        s.run("class A: pass\nobj = A()")
        v = s.variable("obj")
        assert v["value"] is None and "A object" in v["repr"]
        h.write_file("big.txt", "file text")
        s.load_variable("ft", "big.txt")
        assert s.get_variable("ft") == "file text"
        r = s.run("1/0")
        assert not r.ok and r.error.type == "ZeroDivisionError"
        r = s.run("import time\ntime.sleep(10)", timeout=0.5)
        assert r.status == "timeout" and not r.state_lost
        assert s.get_variable("x") == 2  # kept across the timeout
        r = s.run("print('p')\n{'a': [1]}")
        assert r.stdout == "p\n" and r.return_value == {"a": [1]}
        s.reset()
        with pytest.raises(cc.NotFound):
            s.get_variable("x")
        assert h.python("41 + 1").return_value == 42
        with pytest.raises(cc.InvalidRequest):
            s.set_variable("not an identifier", 1)
    finally:
        sclient.remove(name)


# ---- host functions -----------------------------------------------------------


def test_host_functions_async(codecage_pkg, aclient, name):
    cc = codecage_pkg
    calls = []

    def llm_query(prompt, **kw):  # a plain callable: runs on a worker thread
        calls.append(("llm_query", prompt, kw))
        return f"model says: {prompt.upper()}"

    async def search(query, limit=2):  # an async tool
        await asyncio.sleep(0.01)
        calls.append(("search", query, limit))
        return [f"{query}-{i}" for i in range(limit)]

    def failing():
        raise cc.HostFunctionError("model overloaded")

    def crashing():
        raise KeyError("k")

    async def main():
        async with aclient as c:
            h = await c.create(name)
            try:
                s = h.session({"llm_query": llm_query, "tools.search": search})
                s.register("lookup", lambda key: {"key": key, "n": len(key)})
                s.register("failing", failing)
                s.tool("crash", crashing)
                r = await s.run("a = llm_query('hi', temperature=0)\n"
                                "b = tools.search(query='q', limit=3)\n"
                                "c = lookup('abc')\n"
                                "[a, b, c, sorted(tools.list())]")
                assert r.ok, r
                assert r.return_value == ["model says: HI", ["q-0", "q-1", "q-2"],
                                          {"key": "abc", "n": 3}, ["crash", "search"]]
                assert r.host_calls == 4
                assert ("llm_query", "hi", {"temperature": 0}) in calls
                r = await s.run("try:\n    failing()\nexcept HostCallError as e:\n    m = str(e)\nm")
                assert "model overloaded" in r.return_value
                r = await s.run("tools.crash()")
                assert r.status == "error" and r.error.type == "HostCallError"
                assert "KeyError" in r.error.message
                r = await s.run("llm_query('x')\nllm_query('y')", host_budget=1)
                assert r.error.type == "HostCallBudgetExceeded"
                # without host functions the code is told how to enable them
                r = await h.python("llm_query('x')")
                assert r.error.type == "HostCallError"
                # one-shot runs take host functions too
                r = await c.run_python("llm_query('one')", host_functions={"llm_query": llm_query})
                assert r.return_value == "model says: ONE" and r.run_id
            finally:
                await c.remove(name)

    arun(main())


def test_host_functions_sync_and_concurrent_calls(sclient, name):
    h = sclient.create(name)
    try:
        def batched(prompts):
            return [p[::-1] for p in prompts]

        s = h.session({"llm_query_batched": batched, "llm_query": lambda p: p * 2})
        r = s.run("llm_query_batched(['ab', 'cd']) + [llm_query('z')]")
        assert r.return_value == ["ba", "dc", "zz"]
    finally:
        sclient.remove(name)


# ---- errors -------------------------------------------------------------------


def test_typed_errors(codecage_pkg, server, url, name):
    cc = codecage_pkg
    c = cc.sync.SandboxClient(url, TOKEN)
    try:
        with pytest.raises(cc.InvalidRequest) as e:
            c.create("bad name!")
        assert e.value.status == 400 and e.value.code == "invalid_request" and e.value.message
        with pytest.raises(cc.InvalidRequest, match="memory_mib"):
            c.create(cc.SandboxSpec(name, memory_mib=-1))
        with pytest.raises(cc.Forbidden):
            c.create(cc.SandboxSpec(name, memory_mib=10 ** 9))
        with pytest.raises(cc.NotFound, match="nope"):
            c.get("nope-" + name)
        with pytest.raises(cc.NotFound):
            c.handle("nope-" + name).shell("true")
        c.create(name)
        with pytest.raises(cc.Conflict):
            c.create(name)
        with pytest.raises(TypeError):
            c.handle(name).exec("echo", "not-a-list")
        with pytest.raises(TypeError):
            c.create(cc.SandboxSpec(name + "x", egress="pypi.org"))
        with pytest.raises(TypeError, match="unknown"):
            c.run_python("1", memroy_mib=5)
        with pytest.raises(ValueError):
            c.handle(name).session({"not valid": print})
        with pytest.raises(cc.InvalidRequest, match="secrets"):
            c.run_python("1", secrets=["NO_SUCH_SECRET"])
        with pytest.raises(cc.TooLarge):  # over limits.max_body_bytes
            c.handle(name).write_file("big.bin", b"x" * (serverlib.MAX_BODY + 1))
        assert c.handle(name).shell("echo still").stdout == "still\n"
        r = c.handle(name).session({"obj": lambda: object()}).run("obj()")
        assert r.error.type == "HostCallError" and "not JSON" in r.error.message
        c.remove(name)
    finally:
        c.close()
    bad = cc.sync.SandboxClient(url, "wrong-token-0123456789")
    with pytest.raises(cc.Unauthorized):
        bad.list()
    bad.close()


def test_unavailable_and_configuration(codecage_pkg, tmp_path, monkeypatch, server):
    cc = codecage_pkg
    with pytest.raises(cc.SandboxUnavailable, match="no codecage server"):
        cc.sync.SandboxClient(f"unix://{tmp_path}/none.sock").list()
    with pytest.raises(cc.SandboxUnavailable):
        arun(cc.SandboxClient(f"http://127.0.0.1:{serverlib.free_port()}").run_python("1"))
    with pytest.raises(ValueError):
        cc.SandboxClient("ftp://x")
    assert isinstance(cc.SandboxUnavailable("x"), RuntimeError)
    monkeypatch.delenv("CODECAGE_URL", raising=False)
    assert str(cc.SandboxClient().endpoint) == "unix:///var/lib/codecage/codecage.sock"
    monkeypatch.setenv("CODECAGE_URL", f"http://127.0.0.1:{server.port}")
    monkeypatch.setenv("CODECAGE_TOKEN", TOKEN)
    with cc.sync.SandboxClient() as c:
        assert c.run_python("2 + 2").return_value == 4
    monkeypatch.setenv("CODECAGE_URL", server.socket_path)  # a bare socket path
    with cc.sync.SandboxClient() as c:
        assert c.run_shell("echo unix").stdout == "unix\n"


def test_without_tenants_on_the_unix_socket(codecage_pkg, tmp_path):
    s = serverlib.Server(tmp_path)
    try:
        with codecage_pkg.sync.SandboxClient(s.socket_path) as c:
            assert c.run_shell("echo hi").stdout == "hi\n"
    finally:
        s.kill9()


# ---- restart and concurrency --------------------------------------------------


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_handle_survives_a_server_restart(codecage_pkg, tmp_path, transport):
    """A handle to a named sandbox keeps working across a restart of the
    server, blocking and async, over TCP with a token and over the socket:
    the kept-alive connections the restart closed are replaced."""
    cc = codecage_pkg
    s = serverlib.Server(tmp_path, tenants={"t1": TOKEN})
    url = f"http://127.0.0.1:{s.port}" if transport == "tcp" else f"unix://{s.socket_path}"
    try:
        with cc.sync.SandboxClient(url, TOKEN) as c:
            h = c.create("keep")
            h.write_file("state.txt", "before")
            h.session().run("v = 1")
            aclient = cc.SandboxClient(url, TOKEN)

            async def use(handle):  # one kept-alive connection of the async client
                return (await handle.shell("cat state.txt")).stdout

            loop = asyncio.new_event_loop()
            ah = loop.run_until_complete(aclient.get("keep"))
            assert loop.run_until_complete(use(ah)) == "before"
            s.stop()
            with pytest.raises(cc.SandboxUnavailable):
                h.shell("true")
            s.start()
            # the same handles and clients, over new connections (the async client's
            # idle connection died with the old server: its next request finds it
            # closed and goes again over a new one)
            r = h.shell("cat state.txt")
            assert r.stdout == "before" and r.ok
            assert "keep" in c.list()
            assert h.session().run("1 + 1").return_value == 2
            assert loop.run_until_complete(use(ah)) == "before"
            s.stop()
            with pytest.raises(cc.SandboxUnavailable):
                loop.run_until_complete(use(ah))
            s.start()
            assert loop.run_until_complete(use(ah)) == "before"
            loop.run_until_complete(aclient.close())
            loop.close()
            c.remove("keep")
    finally:
        s.stop()


def test_fifty_concurrent_async_runs(codecage_pkg, url):
    async def main():
        async with codecage_pkg.SandboxClient(url, TOKEN) as c:
            return await asyncio.gather(*(c.run_python(f"print({i} * 2)\n{i}") for i in range(50)))

    results = arun(main())
    assert [r.stdout for r in results] == [f"{i * 2}\n" for i in range(50)]
    assert [r.return_value for r in results] == list(range(50))
    assert all(r.ok for r in results) and len({r.run_id for r in results}) == 50


def test_spec_workspace_secrets_and_labels(codecage_pkg, tmp_path):
    """SandboxSpec's workspace (a host folder, mounted writable at
    /mnt/workspace), secrets (injected, redacted) and labels reach the sandbox."""
    cc = codecage_pkg
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "in.txt").write_text("from the host\n")
    os.chmod(shared, 0o777)
    s = serverlib.Server(tmp_path, extra={
        "mounts_allowed": [{"path": str(shared), "writable": True}],
        "secrets": {"API_KEY": {"value": "sk-secret-value-1234"}}})
    try:
        with cc.sync.SandboxClient(s.socket_path) as c:
            h = c.create(cc.SandboxSpec("ws", workspace=str(shared), secrets=("API_KEY",),
                                        labels={"owner": "me"}))
            r = h.shell("cat /mnt/workspace/in.txt; echo out > /mnt/workspace/out.txt; "
                        "echo $API_KEY")
            assert r.stdout == "from the host\n[REDACTED:API_KEY]\n", r
            assert (shared / "out.txt").read_text() == "out\n"
            assert c.get("ws").last_info["labels"] == {"owner": "me"}
            with pytest.raises(cc.Forbidden):
                c.create(cc.SandboxSpec("ws2", workspace=str(tmp_path)))
            c.remove("ws")
    finally:
        s.kill9()


def test_health_sandboxes_start_remove_and_fetch_url(codecage_pkg, tmp_path):
    """The calls the other tests leave out: health(), sandboxes(), a
    handle's start() and remove(), fetch_url() (allowed and refused)."""
    import functools
    import http.server
    import threading
    cc = codecage_pkg
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "f.txt").write_text("served")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "www")))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    (tmp_path / "srv").mkdir()
    s = serverlib.Server(tmp_path / "srv", extra={
        "network": {"allow": [f"127.0.0.1:{port}"], "allow_private": ["127.0.0.1"]}})
    try:
        with cc.sync.SandboxClient(s.socket_path) as c:
            assert c.health()["status"] == "ok"
            h = c.create(cc.SandboxSpec("box", labels={"k": "v"}))
            infos = c.sandboxes(label="k=v")
            assert [i["name"] for i in infos] == ["box"] and infos[0]["labels"] == {"k": "v"}
            assert c.sandboxes(label="k=w") == []
            h.stop()
            h.start()
            assert h.info()["state"] == "running"
            assert h.fetch_url("d/f.txt", f"http://127.0.0.1:{port}/f.txt") == 6
            assert h.read_file("d/f.txt") == b"served"
            with pytest.raises(cc.Forbidden, match="url"):
                h.fetch_url("d/g.txt", f"http://127.0.0.1:{serverlib.free_port()}/f.txt")
            h.remove()
            assert "box" not in c.list()
    finally:
        s.kill9()
        httpd.shutdown()
