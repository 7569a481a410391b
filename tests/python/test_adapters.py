"""codecage.adapters: the executors in the shapes of other agent code
(timeout-enforcing, persistent REPL, code mode) against a real server."""
import asyncio

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


def test_repl_executor(codecage_pkg, server):
    from codecage.adapters import ReplExecutor
    client = codecage_pkg.sync.SandboxClient(url_of(server), TOKEN)
    ex = ReplExecutor(client, max_output_length=100)
    try:
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
        assert r["locals_snapshot"]["words"] == "list" and "context" in r["locals_snapshot"]
        assert prompts == ["the quick brown fox"]
        assert ex.get_variable("last") == "fox" and ex.get_variable("nope") is None
        assert {"words", "last", "n", "context"} <= set(ex.list_variables())
        r = ex.execute("FINAL(last)")
        assert r["stdout"] == '"final:fox"' and set(r["locals_snapshot"]) == set()
        r = ex.execute("1/0")
        assert not r["success"] and "ZeroDivisionError" in r["exception"]
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
    r = ex.execute("import os\nprint(open('/etc/hostname').read() != '')")  # the cage is the boundary
    assert r.success and r.output == "True"
    r = ex.execute("while True: pass")
    assert not r.success and "timeout of 5" in r.error
    r = ex.execute("def f(:")
    assert not r.success and r.error.startswith("Syntax error")
    assert ex.validate_code("x = 1") == (True, None)
    client.close()
