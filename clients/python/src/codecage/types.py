"""The data of the codecage client: SandboxSpec (what to create), ExecResult
(the result contract of every run), and the smaller records the API answers
(artifacts, files, variables, stream events)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple


@dataclass(frozen=True)
class SandboxSpec:
    """What create() asks for. Fields left None take the server's configured
    defaults (docs/CONFIG.md, `defaults`), within its `limits`.

    - image: "host" (the server's userland) or an OCI reference such as
      "python:3.12-slim", admitted by the server's `images.allow`.
    - workspace: a host directory (admitted by the server's `mounts_allowed`)
      mounted writable at /mnt/workspace. Every named sandbox already has its
      own persistent /workspace; this shares a host folder besides it.
    - secrets: names of the server's secrets, injected as environment values.
    - egress: hosts the sandbox may reach over HTTP(S) (`network` in the API);
      empty: no network.
    """

    name: str
    image: Optional[str] = None
    memory_mib: Optional[int] = None
    cpus: Optional[float] = None
    workspace: Optional[str] = None
    secrets: Tuple[str, ...] = ()
    egress: Tuple[str, ...] = ()
    labels: Dict[str, str] = field(default_factory=dict)
    # codecage's further spec fields (docs/API.md, create)
    env: Dict[str, str] = field(default_factory=dict)
    timeout_s: Optional[float] = None
    disk_mib: Optional[int] = None
    pids: Optional[int] = None
    output_max_bytes: Optional[int] = None
    idle_timeout_s: Optional[float] = None
    requirements: Tuple[str, ...] = ()
    mounts: Tuple[Mapping[str, Any], ...] = ()

    def to_api(self) -> Dict[str, Any]:
        return spec_fields(self.__dict__, name=self.name)


_SPEC_KEYS = ("image", "memory_mib", "cpus", "timeout_s", "disk_mib", "pids",
              "output_max_bytes", "idle_timeout_s")


def spec_fields(kw: Mapping[str, Any], name: Optional[str] = None) -> Dict[str, Any]:
    """The API's spec fields from SandboxSpec-style keywords (None and empty
    values are left out so the server's defaults apply)."""
    out: Dict[str, Any] = {}
    if name is not None:
        out["name"] = name
    for k in _SPEC_KEYS:
        if kw.get(k) is not None:
            out[k] = kw[k]
    for k in ("env", "labels"):
        if kw.get(k):
            out[k] = dict(kw[k])
    for k in ("secrets", "requirements"):
        if kw.get(k):
            if isinstance(kw[k], str):
                raise TypeError(f"{k} must be a sequence of strings, not a string")
            out[k] = list(kw[k])
    network = list(kw.get("egress") or ()) + list(kw.get("network") or ())
    if isinstance(kw.get("egress"), str) or isinstance(kw.get("network"), str):
        raise TypeError("egress must be a sequence of host names, not a string")
    if network:
        out["network"] = network
    mounts = [dict(m) for m in kw.get("mounts") or ()]
    if kw.get("workspace"):
        mounts.append({"source": str(kw["workspace"]), "target": "/mnt/workspace",
                       "writable": True})
    if mounts:
        out["mounts"] = mounts
    unknown = set(kw) - set(_SPEC_KEYS) - {"env", "labels", "secrets", "requirements", "egress",
                                            "network", "mounts", "workspace", "name"}
    if unknown:
        raise TypeError(f"unknown sandbox spec field(s): {', '.join(sorted(unknown))}")
    return out


@dataclass(frozen=True)
class Artifact:
    """A file a run wrote to /workspace/output/."""

    name: str
    path: str
    size: int
    mime: str


@dataclass(frozen=True)
class PythonError:
    """An exception raised by Python code in the sandbox."""

    type: str
    message: str
    traceback: str

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"


@dataclass(frozen=True)
class ExecResult:
    """The result contract of exec, shell, one-shot and Python runs.

    A program that fails is a result, not an exception: `status` says what
    happened (ok, error, timeout, oom, output_limit, cancelled,
    internal_error), `ok` whether it succeeded.
    """

    stdout: str
    stderr: str = ""
    exit_code: Optional[int] = 0
    truncated: bool = False
    status: str = "ok"
    signal: Optional[int] = None
    duration_ms: int = 0
    cpu_ms: int = 0
    peak_memory_bytes: int = 0
    artifacts: Tuple[Artifact, ...] = ()
    reason: Optional[str] = None
    error: Optional[PythonError] = None
    return_value: Any = None
    return_repr: Optional[str] = None
    state_lost: bool = False
    host_calls: int = 0
    restarted: bool = False
    run_id: Optional[str] = None
    pooled: Optional[bool] = None
    truncation: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def output(self) -> str:
        """stdout followed by stderr."""
        return self.stdout + (self.stderr or "")

    @property
    def ok(self) -> bool:
        """exit_code == 0 when the result has an exit code; for results
        without one (Python runs on servers that do not report it), status
        == "ok"."""
        if self.exit_code is not None:
            return self.exit_code == 0
        return self.status == "ok"

    @classmethod
    def from_api(cls, d: Mapping[str, Any]) -> "ExecResult":
        err = d.get("error")
        perr = None
        if isinstance(err, dict):
            perr = PythonError(str(err.get("type", "")), str(err.get("message", "")),
                               str(err.get("traceback", "")))
        trunc = d.get("truncated")
        return cls(
            stdout=d.get("stdout") or "",
            stderr=d.get("stderr") or "",
            exit_code=d.get("exit_code"),
            truncated=bool(trunc),
            status=d.get("status") or "ok",
            signal=d.get("signal"),
            duration_ms=int(d.get("duration_ms") or 0),
            cpu_ms=int(d.get("cpu_ms") or 0),
            peak_memory_bytes=int(d.get("peak_memory_bytes") or 0),
            artifacts=tuple(Artifact(a.get("name", ""), a.get("path", ""), int(a.get("size", 0)),
                                     a.get("mime", "application/octet-stream"))
                            for a in d.get("artifacts") or ()),
            reason=d.get("reason"),
            error=perr,
            return_value=d.get("return_value"),
            return_repr=d.get("return_repr"),
            state_lost=bool(d.get("state_lost")),
            host_calls=int(d.get("host_calls") or 0),
            restarted=bool(d.get("restarted")),
            run_id=d.get("run_id"),
            pooled=d.get("pooled"),
            truncation=trunc if isinstance(trunc, dict) else None,
            raw=dict(d),
        )


@dataclass(frozen=True)
class FileEntry:
    name: str
    path: str
    type: str
    size: int
    mtime: int
    mime: Optional[str] = None

    @classmethod
    def from_api(cls, d: Mapping[str, Any]) -> "FileEntry":
        return cls(d.get("name", ""), d.get("path", ""), d.get("type", ""), int(d.get("size", 0)),
                   int(d.get("mtime", 0)), d.get("mime"))


@dataclass(frozen=True)
class VariableInfo:
    name: str
    type: str
    size: Optional[int]


@dataclass(frozen=True)
class Event:
    """One event of a streamed run: kind is "stdout", "stderr", "status" or
    "result" (the last; `result` holds the ExecResult). `text` is the chunk
    of output or the status message."""

    kind: str
    text: str = ""
    result: Optional[ExecResult] = None


def argv_of(cmd: str, args: Optional[Sequence[str]]) -> List[str]:
    if isinstance(args, str):
        raise TypeError("args must be a sequence of strings, not a string")
    return [cmd, *(args or ())]
