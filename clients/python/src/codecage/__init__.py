"""codecage: the Python client of the codecage sandbox server.

    import codecage
    async with codecage.SandboxClient() as client:
        r = await client.run_python("print(6*7)")

`codecage.sync.SandboxClient` is the same API, blocking.
"""
from .client import PythonSession, SandboxClient, SandboxHandle
from .errors import (CodecageError, Conflict, Forbidden, HostFunctionError,
                     InsufficientStorage, InvalidRequest, MethodNotAllowed, NotFound,
                     SandboxUnavailable, ServerError, TooLarge, Unauthorized,
                     UnsupportedMediaType, UpstreamError)
from .types import (Artifact, Event, ExecResult, FileEntry, PythonError, SandboxSpec,
                    VariableInfo)

from . import sync  # noqa: E402  (codecage.sync: the blocking twin)

__version__ = "0.1.0"

__all__ = [
    "SandboxClient", "SandboxHandle", "PythonSession", "SandboxSpec", "ExecResult", "Artifact",
    "Event", "FileEntry", "PythonError", "VariableInfo", "CodecageError", "SandboxUnavailable",
    "InvalidRequest", "Unauthorized", "Forbidden", "NotFound", "MethodNotAllowed", "Conflict",
    "TooLarge", "UnsupportedMediaType", "InsufficientStorage", "UpstreamError", "ServerError",
    "HostFunctionError",
]
