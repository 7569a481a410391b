"""codecage.frameworks: DSPy's CodeInterpreter and smolagents'
PythonExecutor shapes on a real server (neither framework is installed
here: the look-alike result types are used)."""
import pytest

from clientlib import TOKEN, codecage_pkg, server  # noqa: F401


@pytest.fixture
def client(codecage_pkg, server):
    c = codecage_pkg.sync.SandboxClient(f"unix://{server.socket_path}", TOKEN)
    yield c
    c.close()


def test_dspy_code_interpreter(client):
    from codecage.frameworks import CodeExecutionError, CodeInterpreter, FinalOutput
    seen = []

    def search(query):
        seen.append(query)
        return [query + "!"]

    with CodeInterpreter(tools={"search": search}, client=client, timeout=10) as ci:
        name = ci.name
        assert name in client.list()
        assert ci.execute("x = 40") is None
        assert ci.execute("print(x + n)", variables={"n": 2}) == "42\n"
        assert ci.execute("print(search(query='q'))") == "['q!']\n" and seen == ["q"]
        with pytest.raises(SyntaxError):
            ci.execute("def (:")
        with pytest.raises(CodeExecutionError, match="NameError"):
            ci.execute("undefined_name")
        out = ci.execute("SUBMIT(answer=x + 2)\nprint('not reached')")
        assert out == FinalOutput({"answer": 42})
        assert ci.execute("x") is None  # state persists; no output
    assert name not in client.list()


def test_smolagents_python_executor(client):
    from codecage.frameworks import InterpreterError, PythonExecutor
    ex = PythonExecutor(["numpy"], client=client, timeout=10)
    try:
        ex.send_tools({"add": lambda a, b: a + b, "final_answer": lambda answer: f"A={answer}"})
        ex.send_variables({"base": 2})
        out = ex("y = add(a=base, b=3)\nprint('y is', y)\ny")
        assert (out.output, out.logs, out.is_final_answer) == (5, "y is 5\n", False)
        out = ex("final_answer(y * 2)\nprint('not reached')")
        assert (out.output, out.is_final_answer) == ("A=10", True)
        with pytest.raises(InterpreterError, match="ZeroDivisionError"):
            ex("print('before')\n1/0")
    finally:
        ex.cleanup()
    assert ex.name not in client.list()
