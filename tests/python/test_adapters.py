"""codecage.adapters: the executors in the shapes of other agent code
(timeout-enforcing, persistent REPL, code mode) against a real server."""
import asyncio
import os

import pytest

import serverlib
from clientlib import TOKEN, codecage_pkg, server  # noqa: F401


def url_of(server):
    return f"http://127.0.0.1:{server.port}"


def test_timeout_executor(codecage_pkg, server):
    from codecage.adapters import TimeoutExecutor

    async def main():
        ex = TimeoutExecutor(codecage_pkg.SandboxClient(url_of(server), TOKEN),
                             max_output_chars=50)
        ok = await ex.run("print(a + b)", variables={"a": 1, "b": 2}, timeout=10)
        slow = await ex.run("import time\ntime.sleep(5)", timeout=0.5)
        bad = await ex.run("raise KeyError('k')")
        big = await ex.run("print('x' * 100)")
        await ex.close()
        return ok, slow, bad, big

    ok, slow, bad, big = asyncio.run(main())
    assert ok["success"] and ok["stdout"] == "3\n" and ok["diagnostics"] is None
    assert not slow["success"] and slow["diagnostics"]["error_type"] == "TIMEOUT"
    assert slow["stderr"] == "Execution timed out after 0.50s"
    assert not bad["success"] and bad["diagnostics"]["error_type"] == "KeyError"
    assert big["stdout"].startswith("x" * 50) and "[truncated 51 chars]" in big["stdout"]


def test_timeout_executor_options(codecage_pkg, tmp_path, monkeypatch):
    """SandboxOptions: network, environment variables of this process, host
    paths to read and to write, the output cap."""
    from codecage.adapters import SandboxedPythonExecutor, SandboxOptions, TimeoutExecutor
    assert SandboxedPythonExecutor is TimeoutExecutor
    ro, rw = tmp_path / "ro", tmp_path / "rw"
    ro.mkdir()
    rw.mkdir()
    (ro / "in.txt").write_text("readable")
    os.chmod(rw, 0o777)
    (tmp_path / "srv").mkdir()
    s = serverlib.Server(tmp_path / "srv", extra={
        "mounts_allowed": [{"path": str(ro)}, {"path": str(rw), "writable": True}]})
    monkeypatch.setenv("CC_ADAPTER_A", "alpha")
    monkeypatch.setenv("CC_ADAPTER_B", "beta")
    code = ("import os, urllib.request\n"
            "print(os.environ.get('CC_ADAPTER_A'), os.environ.get('CC_ADAPTER_B'),\n"
            "      bool(os.environ.get('HTTPS_PROXY')))\n"
            "print(open(ro + '/in.txt').read())\n"
            "try:\n"
            "    open(ro + '/new.txt', 'w')\n"
            "except OSError as e:\n"
            "    print('ro refused', e.errno)\n"
            "open(rw + '/out.txt', 'w').write('written')\n"
            "try:\n"
            "    urllib.request.urlopen('http://blocked.invalid/', timeout=5)\n"
            "except Exception as e:\n"
            "    print('blocked', getattr(e, 'code', None))\n")
    paths = {"ro": str(ro), "rw": str(rw)}

    async def main():
        client = codecage_pkg.SandboxClient(s.socket_path)
        opened = TimeoutExecutor(client, options=SandboxOptions(
            enable_network_access=["allowed.invalid"], enable_env_vars=["CC_ADAPTER_A"],
            enable_read_paths=[str(ro)], enable_write_paths=[str(rw)], max_output_chars=200))
        everything = TimeoutExecutor(client, options=SandboxOptions(
            enable_network_access=True, enable_env_vars=True, enable_read_paths=[str(ro)],
            enable_write_paths=[str(rw)]), max_output_chars=20)
        closed = TimeoutExecutor(client)
        a = await opened.run(code, variables=paths, timeout=20)
        b = await everything.run(code, variables=paths, timeout=20)
        c = await closed.run("import os\nprint(os.environ.get('CC_ADAPTER_A'), "
                             "os.environ.get('HTTPS_PROXY'), os.path.exists(ro))",
                             variables=paths, timeout=20)
        await client.close()
        return a, b, c

    try:
        a, b, c = asyncio.run(main())
    finally:
        s.kill9()
    assert a["success"], a
    assert a["stdout"] == "alpha None True\nreadable\nro refused 30\nblocked 403\n", a
    assert (rw / "out.txt").read_text() == "written"
    assert b["success"] and b["stdout"].startswith("alpha beta True\nre"), b
    assert b["stdout"].endswith("... [truncated 31 chars]"), b  # max_output_chars=20 wins
    assert c["success"] and c["stdout"] == "None None False\n", c
    with pytest.raises(TypeError):
        SandboxOptions(enable_env_vars="CC_ADAPTER_A").to_spec()


def test_repl_executor(codecage_pkg, server):
    from codecage.adapters import ReplExecutor
    client = codecage_pkg.sync.SandboxClient(url_of(server), TOKEN)
    ex = ReplExecutor(client, max_output_length=100, allowed_imports=["re"])
    try:
        assert set(ex.list_variables()) == {"format_exc", "safe_json_dumps"}  # the helpers
        ex.set_context("the quick brown fox")
        ex.set_variable("n", 3)
        prompts = []

        def llm_query(prompt):
            prompts.append(prompt)
            return prompt.split()[-1]

        ex.inject_function("llm_query", llm_query)
        ex.inject_function("FINAL", lambda answer: f"final:{answer}")
        r = ex.execute("words = context.split()\nlast = llm_query(context)\nprint(len(words) * n)")
        assert r["success"] and r["stdout"] == "12\n" and r["exception"] is None
        assert r["stderr"] == "" and r["execution_time"] > 0
        # new names with their repr; context and n were there before
        assert r["locals_snapshot"] == {"words": "['the', 'quick', 'brown', 'fox']",
                                        "last": "'fox'"}
        assert prompts == ["the quick brown fox"]
        assert ex.get_variable("last") == "fox" and ex.get_variable("nope") is None
        assert {"words", "last", "n", "context", "llm_query", "FINAL", "format_exc",
                "safe_json_dumps"} <= set(ex.list_variables())
        r = ex.execute("print('answer:')\nFINAL(last)")  # output, then the value as JSON
        assert r["stdout"] == 'answer:\n\n"final:fox"' and r["locals_snapshot"] == {}
        r = ex.execute("big = 'y' * 1000\nprint(big)")
        assert r["locals_snapshot"]["big"] == repr("y" * 1000)[:500] + "..."
        assert r["stdout"] == "y" * 100 + "\n... (truncated, total 1001 chars)"
        r = ex.execute("safe_json_dumps({'a': object()}).startswith('{\"a\": \"<object')")
        assert r["stdout"] == "true", r
        r = ex.execute("try:\n    1/0\nexcept ZeroDivisionError:\n    tb = format_exc()\n"
                       "'ZeroDivisionError' in tb")
        assert r["stdout"] == "true", r
        r = ex.execute("1/0")
        assert not r["success"] and "ZeroDivisionError" in r["exception"]
        assert "Traceback" in r["stderr"]
        ex.reset()
        assert ex.get_variable("last") is None
        assert set(ex.list_variables()) == {"format_exc", "safe_json_dumps"}
        r = ex.execute("llm_query('x')")  # injected functions went with the reset
        assert not r["success"] and "HostCallError" in r["exception"]
    finally:
        ex.close()
        assert ex.sandbox.name not in client.list()
        client.close()


def test_code_mode_executor(codecage_pkg, server):
    from codecage.adapters import CodeModeExecutor

    class Tools:
        def __init__(self):
            self.calls = []

        def get_weather(self, city):
            self.calls.append(city)
            return {"city": city, "temp": 21}

    tools = Tools()
    client = codecage_pkg.sync.SandboxClient(url_of(server), TOKEN)
    ex = CodeModeExecutor(tools, timeout=5, client=client)
    r = ex.execute("w = tools.get_weather(city='Oslo')\nprint(w['temp'])\n"
                   "__return_value__ = w")
    assert r.success and r.output == "21" and r.return_value == {"city": "Oslo", "temp": 21}
    assert tools.calls == ["Oslo"]
    r = ex.execute("print(json.dumps(tools.get_weather('Rome')))")  # json is there; positional
    assert r.success and r.output == '{"city": "Rome", "temp": 21}', r
    r = ex.execute("import sys\nprint('a')\nprint('b', file=sys.stderr)")
    assert r.output == "a\nSTDERR: b"
    r = ex.execute("import os\nprint(open('/etc/hostname').read() != '')")  # the cage is the boundary
    assert r.success and r.output == "True"
    r = ex.execute("while True: pass")
    assert not r.success and "timeout of 5" in r.error
    r = ex.execute("def f(:")
    assert not r.success and r.error.startswith("Syntax error")
    assert ex.validate_code("x = 1") == (True, None)
    from codecage.adapters import SandboxExecutor
    small = SandboxExecutor(tools, 5, 10, True, client=client)  # the positional shape
    r = small.execute("print('x' * 50)")
    assert r.success and r.output == "x" * 10 + "\n... (output truncated)"
    client.close()
