"""Executors in the shapes other agent code already programs against, backed
by codecage sandboxes:

- TimeoutExecutor: `await run(code, timeout=, variables=)` answering an
  ExecutionResult dict {success, stdout, stderr, duration_ms, diagnostics}
  (a timeout-enforcing executor); each run is a pooled one-shot sandbox.
- ReplExecutor: a persistent REPL (set_context, set_variable, get_variable,
  list_variables, inject_function, execute -> dict) on one named sandbox's
  Python session; injected functions (llm_query, ...) are host functions.
- CodeModeExecutor: `execute(code) -> ExecutionResult(success, output, error,
  execution_time, return_value)` for code that orchestrates tools: every
  public method of `tools_api` is `tools.NAME(**kwargs)` in the code.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

from . import sync as _sync
from .client import SandboxClient
from .errors import NotFound
from .types import ExecResult


def _cut(text: str, limit: int) -> str:
    if limit and len(text) > limit:
        return text[:limit] + f"... [truncated {len(text) - limit} chars]"
    return text


def _prelude(variables: Optional[Mapping[str, Any]]) -> str:
    """Code that defines `variables` (JSON values) before the user's code."""
    if not variables:
        return ""
    blob = json.dumps(dict(variables))
    return f"import json as _cc_json\nglobals().update(_cc_json.loads({blob!r}))\ndel _cc_json\n"


# ---- a timeout-enforcing executor ---------------------------------------------


class TimeoutExecutor:
    """`await run(code, timeout=30, variables=None)` -> ExecutionResult dict.
    The server enforces the timeout (the code is interrupted); every run is
    a fresh pooled sandbox, so nothing leaks from one run to the next."""

    def __init__(self, client: Optional[SandboxClient] = None, *,
                 max_output_chars: int = 32_768, **spec: Any) -> None:
        self.client = client or SandboxClient()
        self.max_output_chars = max_output_chars
        self.spec = spec

    async def run(self, code: str, *, timeout: float = 30,
                  variables: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        if timeout <= 0:
            raise ValueError("timeout must be greater than zero seconds")
        started = time.perf_counter()
        r = await self.client.run_python(_prelude(variables) + code, timeout=timeout, **self.spec)
        out: Dict[str, Any] = {
            "success": r.ok, "stdout": _cut(r.stdout, self.max_output_chars),
            "stderr": _cut(r.stderr, self.max_output_chars),
            "duration_ms": int((time.perf_counter() - started) * 1000), "diagnostics": None}
        if r.status == "timeout":
            out["stderr"] = f"Execution timed out after {timeout:.2f}s"
            out["diagnostics"] = {"error_type": "TIMEOUT", "timeout_seconds": timeout}
        elif r.error is not None:
            out["stderr"] = _cut(r.stderr + r.error.traceback, self.max_output_chars)
            out["diagnostics"] = {"error_type": r.error.type, "traceback": r.error.traceback}
        elif not r.ok:
            out["diagnostics"] = {"error_type": r.status.upper(), "reason": r.reason}
        return out

    async def close(self) -> None:
        await self.client.close()


# ---- a persistent REPL executor -----------------------------------------------


class ReplExecutor:
    """A persistent namespace across code blocks, in one named sandbox."""

    def __init__(self, client: Optional["_sync.SandboxClient"] = None, *,
                 max_output_length: int = 8192, name: Optional[str] = None,
                 timeout: Optional[float] = None, **spec: Any) -> None:
        self.client = client or _sync.SandboxClient()
        self._own_client = client is None
        self.max_output_length = max_output_length
        self.timeout = timeout
        self.sandbox = self.client.create(name or f"repl-{uuid.uuid4().hex[:12]}", **spec)
        self.session = self.sandbox.session()
        self._known: Set[str] = set()

    def set_context(self, context: str, variable_name: str = "context") -> None:
        self.session.set_context(context, variable_name)

    def set_variable(self, name: str, value: Any) -> None:
        self.session.set_variable(name, value)

    def get_variable(self, name: str) -> Optional[Any]:
        """The value, or None for an unknown variable."""
        try:
            return self.session.get_variable(name)
        except NotFound:
            return None

    def list_variables(self) -> List[str]:
        return self.session.list_variables()

    def inject_function(self, name: str, func: Callable[..., Any]) -> None:
        """func becomes callable from the code as `name` (llm_query,
        llm_query_batched, FINAL, ...): a host function of this process."""
        self.session.register(name, func)

    def execute(self, code: str) -> Dict[str, Any]:
        """{stdout, stderr, locals_snapshot (new names -> type), execution_time,
        success, exception}."""
        started = time.time()
        r: ExecResult = self.session.run(code, timeout=self.timeout)
        stdout = r.stdout
        if r.return_value is not None:
            stdout += json.dumps(r.return_value)
        elif r.return_repr is not None:
            stdout += r.return_repr
        stderr = r.stderr
        exception = None
        if r.error is not None:
            stderr += r.error.traceback or str(r.error)
            exception = str(r.error)
        elif not r.ok:
            exception = r.reason or r.status
            stderr += exception
        infos = self.session.variables()
        new = {v.name: v.type for v in infos if v.name not in self._known}
        self._known = {v.name for v in infos}
        return {"stdout": _cut(stdout, self.max_output_length),
                "stderr": _cut(stderr, self.max_output_length),
                "locals_snapshot": new, "execution_time": time.time() - started,
                "success": r.ok, "exception": exception}

    def reset(self) -> None:
        self.session.reset()
        self._known = set()

    def close(self) -> None:
        """Removes the sandbox."""
        try:
            self.client.remove(self.sandbox.name)
        finally:
            if self._own_client:
                self.client.close()


# ---- a code-mode executor -----------------------------------------------------


@dataclass
class CodeModeResult:
    success: bool
    output: str
    error: Optional[str] = None
    execution_time: float = 0.0
    return_value: Any = None


class CodeModeExecutor:
    """Runs code that calls `tools.NAME(**kwargs)`; each call runs the method
    NAME of tools_api in this process. The sandbox is the boundary, so the
    code is not pattern-checked: it may import and open what it likes inside.
    A value the code stores in `__return_value__` is `return_value`."""

    def __init__(self, tools_api: Any, *, timeout: float = 30.0,
                 max_output_size: int = 2_000_000,
                 client: Optional["_sync.SandboxClient"] = None, **spec: Any) -> None:
        self.tools_api = tools_api
        self.timeout = timeout
        self.max_output_size = max_output_size
        self.client = client or _sync.SandboxClient()
        self.spec = spec

    def _tools(self) -> Dict[str, Callable[..., Any]]:
        out = {}
        for n in dir(self.tools_api):
            f = getattr(self.tools_api, n, None)
            if not n.startswith("_") and callable(f) and n.isidentifier():
                out["tools." + n] = f
        return out

    def validate_code(self, code: str) -> Tuple[bool, Optional[str]]:
        try:
            compile(code, "<code>", "exec")
            return True, None
        except SyntaxError as e:
            return False, str(e)

    def execute(self, code: str) -> CodeModeResult:
        started = time.time()
        ok, err = self.validate_code(code)
        if not ok:
            return CodeModeResult(False, "", f"Syntax error: {err}", time.time() - started)
        wrapped = code + "\nglobals().get('__return_value__')"
        r = self.client.run_python(wrapped, timeout=self.timeout, host_functions=self._tools(),
                                   **self.spec)
        parts = [p for p in (r.stdout.strip(), r.stderr.strip() and f"STDERR: {r.stderr.strip()}")
                 if p]
        output = "\n".join(parts)
        if len(output) > self.max_output_size:
            output = output[: self.max_output_size] + "\n... (output truncated)"
        elapsed = time.time() - started
        if r.status == "timeout":
            return CodeModeResult(False, output,
                                  f"Code execution exceeded timeout of {self.timeout} seconds",
                                  elapsed)
        if r.error is not None:
            return CodeModeResult(False, output, f"{r.error.type}: {r.error.message}", elapsed)
        if not r.ok:
            return CodeModeResult(False, output, r.reason or r.status, elapsed)
        return CodeModeResult(True, output, None, elapsed, r.return_value)
