"""codecage.frameworks: DSPy's CodeInterpreter and smolagents'
PythonExecutor on a real server. Neither framework is installed here, so
their published interfaces are written out below as shapes (not code) and
the adapters, with their look-alike result types, are checked against them
and driven through them:

- DSPy 3.x, stanfordnlp/dspy commit 4ed377ee9110e912d4f5e1be43b317b87455053c,
  dspy/primitives/code_interpreter.py (the CodeInterpreter protocol) and
  dspy/predict/rlm.py (how dspy.RLM drives it: tools.update, output_fields);
- smolagents 1.27.0.dev0, huggingface/smolagents commit
  e3a5b8994b301983b91c0325546e9dc82eab8cf0, src/smolagents/local_python_executor.py
  (PythonExecutor, CodeOutput) and agents.py (CodeAgent's calls)."""
import dataclasses
import inspect
from typing import Any, Callable, Dict, Optional, Protocol, runtime_checkable

import pytest

from clientlib import TOKEN, codecage_pkg, server  # noqa: F401

E = inspect.Parameter.empty
POS = inspect.Parameter.POSITIONAL_OR_KEYWORD
DSPY_METHODS = {"start": [], "execute": [("code", POS, E), ("variables", POS, None)],
                "shutdown": []}
SMOL_METHODS = {"send_tools": [("tools", POS, E)], "send_variables": [("variables", POS, E)],
                "__call__": [("code_action", POS, E)], "cleanup": []}


@runtime_checkable
class CodeInterpreterShape(Protocol):
    """DSPy's CodeInterpreter protocol, which dspy.RLM checks with isinstance."""

    @property
    def tools(self) -> Dict[str, Callable[..., Any]]: ...

    def start(self) -> None: ...

    def execute(self, code: str, variables: Optional[Dict[str, Any]] = None) -> Any: ...

    def shutdown(self) -> None: ...


def params(f):
    return [(p.name, p.kind, p.default) for p in list(inspect.signature(f).parameters.values())[1:]]


@pytest.fixture
def client(codecage_pkg, server):
    c = codecage_pkg.sync.SandboxClient(f"unix://{server.socket_path}", TOKEN)
    yield c
    c.close()


def test_dspy_shapes(codecage_pkg):
    from codecage import frameworks as fw
    for meth, ps in DSPY_METHODS.items():
        assert params(getattr(fw.CodeInterpreter, meth)) == ps, meth
    assert isinstance(fw.CodeInterpreter.tools, property)
    assert issubclass(fw.CodeExecutionError, fw.CodeInterpreterError)
    assert issubclass(fw.CodeInterpreterError, RuntimeError)
    assert fw.FinalOutput({"a": 1}) == fw.FinalOutput({"a": 1}) and fw.FinalOutput(1).output == 1
    assert repr(fw.FinalOutput("x")) == "FinalOutput('x')"


def test_smolagents_shapes(codecage_pkg):
    from codecage import frameworks as fw
    for meth, ps in SMOL_METHODS.items():
        assert params(getattr(fw.PythonExecutor, meth)) == ps, meth
    assert [(f.name, f.default) for f in dataclasses.fields(fw.CodeOutput)] == [
        ("output", dataclasses.MISSING), ("logs", dataclasses.MISSING),
        ("is_final_answer", dataclasses.MISSING)]
    assert issubclass(fw.InterpreterError, ValueError)


def test_dspy_code_interpreter(client):
    from codecage.frameworks import (CodeExecutionError, CodeInterpreter, CodeInterpreterError,
                                     FinalOutput)
    seen = []

    def search(query, limit=1):
        seen.append((query, limit))
        return [query + "!"] * limit

    with CodeInterpreter(tools={"search": search}, client=client, timeout=10) as ci:
        assert isinstance(ci, CodeInterpreterShape)
        name = ci.name
        assert name in client.list()
        ci.start()  # idempotent
        assert ci.execute("x = 40") is None
        assert ci.execute("print(x + n)", variables={"n": 2}) == "42\n"
        assert ci.execute("print(search(query='q'))") == "['q!']\n"
        assert ci.execute("print(search('p', 2))") == "['p!', 'p!']\n"  # positional, by name
        assert seen == [("q", 1), ("p", 2)]
        with pytest.raises(SyntaxError):
            ci.execute("def (:")
        with pytest.raises(CodeExecutionError, match="NameError"):
            ci.execute("undefined_name")
        # dspy.RLM adds its tools to the dict and sets output_fields before running
        ci.tools.update({"llm_query": lambda prompt: prompt.upper()})
        assert ci.execute("print(llm_query('hi'))") == "HI\n"
        assert ci.execute("SUBMIT(x)\nprint('not reached')") == FinalOutput({"output": 40})
        ci.output_fields = [{"name": "answer", "type": "int"}, {"name": "why"}]
        out = ci.execute("SUBMIT(x + 2, why='sum')\nprint('not reached')")
        assert out == FinalOutput({"answer": 42, "why": "sum"})
        assert ci.execute("SUBMIT(why='w', answer=1)") == FinalOutput({"answer": 1, "why": "w"})
        with pytest.raises(CodeExecutionError, match="why"):
            ci.execute("SUBMIT(1)")  # a missing output field
        assert ci.execute("x") is None  # state persists; no output
        # a dead interpreter process ends the session for good
        with pytest.raises(CodeInterpreterError) as e:
            ci.execute("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
        assert type(e.value) is CodeInterpreterError  # not a recoverable CodeExecutionError
        with pytest.raises(CodeInterpreterError, match="lost") as e:
            ci.execute("print(1)")
        assert type(e.value) is CodeInterpreterError
    assert name not in client.list()


def test_smolagents_python_executor(client):
    from codecage.frameworks import CodeOutput, InterpreterError, PythonExecutor
    ex = PythonExecutor(["numpy"], client=client, timeout=10)
    try:
        # CodeAgent: send_variables(variables=state), then send_tools({**tools, **managed_agents})
        ex.send_variables(variables={"base": 2})
        ex.send_tools({"add": lambda a, b: a + b, "final_answer": lambda answer: f"A={answer}"})
        out = ex("y = add(a=base, b=3)\nprint('y is', y)\ny")
        assert isinstance(out, CodeOutput)
        assert (out.output, out.logs, out.is_final_answer) == (5, "y is 5\n", False)
        out = ex("final_answer(y * 2)\nprint('not reached')")
        assert (out.output, out.is_final_answer) == ("A=10", True)
        with pytest.raises(InterpreterError, match="ZeroDivisionError"):
            ex("print('before')\n1/0")
    finally:
        ex.cleanup()
    assert ex.name not in client.list()
