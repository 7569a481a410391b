"""Drop-in code executors for agent frameworks, each on one named codecage
sandbox's Python session (state persists across calls; the sandbox is the
boundary, so code may import anything the sandbox has):

- CodeInterpreter: DSPy's CodeInterpreter protocol (tools, start, execute,
  shutdown), for dspy.RLM and friends. SUBMIT(...) returns FinalOutput.
- PythonExecutor: smolagents' PythonExecutor (send_tools, send_variables,
  __call__ -> CodeOutput), for CodeAgent(executor=...). final_answer(...)
  ends the step with is_final_answer.

Neither framework is imported unless installed: their own FinalOutput,
CodeExecutionError, CodeOutput and InterpreterError are used when present,
look-alikes of the same shape otherwise. Tools are host functions: they run
in this process, their arguments and results cross as JSON.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional

from . import sync as _sync
from .errors import HostFunctionError
from .types import ExecResult

try:  # pragma: no cover - only with DSPy installed
    from dspy.primitives.code_interpreter import (  # type: ignore[import]
        CodeExecutionError, CodeInterpreterError, FinalOutput)
except Exception:  # noqa: BLE001 - DSPy absent or of another version
    class CodeInterpreterError(RuntimeError):  # type: ignore[no-redef]
        """An interpreter failure code cannot repair (the session was lost)."""

    class CodeExecutionError(CodeInterpreterError):  # type: ignore[no-redef,misc]
        """A recoverable error raised by the submitted code or a tool."""

    class FinalOutput:  # type: ignore[no-redef]
        """What execute() returns once the code called SUBMIT()."""

        def __init__(self, output: Any) -> None:
            self.output = output

        def __repr__(self) -> str:
            return f"FinalOutput({self.output!r})"

        def __eq__(self, other: object) -> bool:
            return isinstance(other, FinalOutput) and self.output == other.output

try:  # pragma: no cover - only with smolagents installed
    from smolagents.local_python_executor import (  # type: ignore[import]
        CodeOutput, InterpreterError)
except Exception:  # noqa: BLE001
    @dataclass
    class CodeOutput:  # type: ignore[no-redef]
        output: Any
        logs: str
        is_final_answer: bool

    class InterpreterError(ValueError):  # type: ignore[no-redef]
        """The code failed: the message says where and why."""

_STOP = "the final answer was given; this run ends here"


class _Final:
    """A host function that records the final answer and stops the code."""

    def __init__(self, transform: Optional[Callable[..., Any]] = None) -> None:
        self.transform = transform
        self.given = False
        self.value: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.transform is not None:
            value = self.transform(*args, **kwargs)
        elif kwargs and not args:
            value = dict(kwargs)
        elif len(args) == 1 and not kwargs:
            value = args[0]
        else:
            value = {"args": list(args), **kwargs}
        self.given, self.value = True, value
        raise HostFunctionError(_STOP)


class _SessionBacked:
    def __init__(self, client: Optional["_sync.SandboxClient"], name: Optional[str],
                 timeout: Optional[float], spec: Mapping[str, Any]) -> None:
        self.client = client or _sync.SandboxClient()
        self._own_client = client is None
        self.name = name or f"agent-{uuid.uuid4().hex[:12]}"
        self.timeout = timeout
        self.spec = dict(spec)
        self.sandbox: Optional[_sync.SandboxHandle] = None
        self.session: Optional[_sync.PythonSession] = None

    def start(self) -> None:
        """Creates the sandbox (idempotent)."""
        if self.sandbox is None:
            self.sandbox = self.client.create(self.name, **self.spec)
            self.session = self.sandbox.session()

    def shutdown(self) -> None:
        """Removes the sandbox."""
        if self.sandbox is not None:
            try:
                self.client.remove(self.name)
            finally:
                self.sandbox = self.session = None
        if self._own_client:
            self.client.close()

    def _run(self, code: str, fns: Dict[str, Callable[..., Any]]) -> ExecResult:
        self.start()
        assert self.session is not None
        self.session.host_functions.clear()
        for n, f in fns.items():
            self.session.register(n, f)
        return self.session.run(code, timeout=self.timeout)


class CodeInterpreter(_SessionBacked):
    """DSPy's CodeInterpreter on a codecage sandbox."""

    execution_instructions = (
        "Python 3 in a Linux sandbox (codecage): state persists across steps, the standard "
        "library and the sandbox's packages are importable, the network is off unless allowed. "
        "Call SUBMIT(...) with the final outputs.")

    def __init__(self, tools: Optional[Mapping[str, Callable[..., Any]]] = None, *,
                 client: Optional["_sync.SandboxClient"] = None, name: Optional[str] = None,
                 timeout: Optional[float] = None, **spec: Any) -> None:
        super().__init__(client, name, timeout, spec)
        self._tools: Dict[str, Callable[..., Any]] = dict(tools or {})

    @property
    def tools(self) -> Dict[str, Callable[..., Any]]:
        return self._tools

    def execute(self, code: str, variables: Optional[Dict[str, Any]] = None) -> Any:
        compile(code, "<code>", "exec")  # a SyntaxError is raised as it is
        self.start()
        assert self.session is not None
        for k, v in (variables or {}).items():
            self.session.set_variable(k, v)
        final = _Final()
        r = self._run(code, {**self._tools, "SUBMIT": final})
        if final.given:
            return FinalOutput(final.value)
        if r.state_lost:
            raise CodeInterpreterError(f"the interpreter's state was lost: {r.reason or r.status}")
        if r.error is not None:
            raise CodeExecutionError(f"{r.error.type}: {r.error.message}")
        if not r.ok:
            raise CodeExecutionError(r.reason or r.status)
        out = r.stdout + r.stderr
        return out if out else None

    def __call__(self, code: str, variables: Optional[Dict[str, Any]] = None) -> Any:
        return self.execute(code, variables)

    def __enter__(self) -> "CodeInterpreter":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


class PythonExecutor(_SessionBacked):
    """smolagents' PythonExecutor on a codecage sandbox."""

    def __init__(self, additional_authorized_imports: Any = None, *,
                 client: Optional["_sync.SandboxClient"] = None, name: Optional[str] = None,
                 timeout: Optional[float] = None, **spec: Any) -> None:
        # imports are not restricted: the sandbox, not an import list, is the boundary
        super().__init__(client, name, timeout, spec)
        self.custom_tools: Dict[str, Callable[..., Any]] = {}

    def send_tools(self, tools: Mapping[str, Callable[..., Any]]) -> None:
        self.custom_tools.update(tools)

    def send_variables(self, variables: Mapping[str, Any]) -> None:
        self.start()
        assert self.session is not None
        for k, v in variables.items():
            self.session.set_variable(k, v)

    def __call__(self, code_action: str) -> CodeOutput:
        tools = dict(self.custom_tools)
        final = _Final(tools.pop("final_answer", None))
        r = self._run(code_action, {**tools, "final_answer": final})
        logs = r.stdout + r.stderr
        if final.given:
            return CodeOutput(output=final.value, logs=logs, is_final_answer=True)
        if r.error is not None:
            raise InterpreterError(f"Code execution failed due to: {r.error.type}: "
                                   f"{r.error.message}\n{logs}")
        if not r.ok:
            raise InterpreterError(f"Code execution failed: {r.reason or r.status}\n{logs}")
        out = r.return_value if r.return_value is not None else r.return_repr
        return CodeOutput(output=out, logs=logs, is_final_answer=False)

    def cleanup(self) -> None:
        self.shutdown()
