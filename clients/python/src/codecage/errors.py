"""The exceptions of the codecage client: one class per error code of the
HTTP API (docs/API.md, "Errors"), each carrying the server's message, and
SandboxUnavailable when no server answers."""
from __future__ import annotations

from typing import Any, Dict, Optional, Type


class CodecageError(Exception):
    """An error answered by the server: HTTP status, API code and message."""

    def __init__(self, message: str, *, status: int = 0, code: str = "",
                 body: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.body = body or {}

    def __str__(self) -> str:
        if self.status:
            return f"{self.message} (HTTP {self.status} {self.code})"
        return self.message


class SandboxUnavailable(CodecageError, RuntimeError):
    """No codecage server answers at the configured address (not running,
    wrong URL or socket path, connection refused or cut)."""


class InvalidRequest(CodecageError, ValueError):
    """400: a malformed request or a bad field; the message names it."""


class Unauthorized(CodecageError):
    """401: missing or unknown bearer token."""


class Forbidden(CodecageError, PermissionError):
    """403: refused by the server's policy (limits, mounts, secrets, quota, images)."""


class NotFound(CodecageError, LookupError):
    """404: no such sandbox, run, file, variable or host call."""


class MethodNotAllowed(CodecageError):
    """405."""


class Conflict(CodecageError):
    """409: the name exists, or the sandbox is not in a state for this."""


class TooLarge(CodecageError):
    """413: a body or a file over the server's limits."""


class UnsupportedMediaType(CodecageError):
    """415."""


class InsufficientStorage(CodecageError):
    """507: the workspace is full."""


class UpstreamError(CodecageError):
    """502/504: a registry or a URL the server fetched failed or was too slow."""


class ServerError(CodecageError):
    """500 or any other status: codecage's own failure."""


class HostFunctionError(Exception):
    """Raise it from a host function to send the sandbox code a HostCallError
    with this message (any other exception does too, with its repr)."""


_BY_CODE: Dict[str, Type[CodecageError]] = {
    "invalid_request": InvalidRequest,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "method_not_allowed": MethodNotAllowed,
    "conflict": Conflict,
    "too_large": TooLarge,
    "unsupported_media_type": UnsupportedMediaType,
    "insufficient_storage": InsufficientStorage,
    "internal": ServerError,
}

_BY_STATUS: Dict[int, Type[CodecageError]] = {
    400: InvalidRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound,
    405: MethodNotAllowed, 409: Conflict, 413: TooLarge, 414: TooLarge,
    415: UnsupportedMediaType, 502: UpstreamError, 504: UpstreamError,
    507: InsufficientStorage,
}


def error_from_response(status: int, body: bytes) -> CodecageError:
    """The typed exception of an error answer (the API's JSON error body, or
    whatever text the server sent)."""
    import json

    doc: Dict[str, Any] = {}
    code = ""
    message = body.decode("utf-8", "replace").strip() or f"HTTP {status}"
    try:
        doc = json.loads(body)
        err = doc.get("error") if isinstance(doc, dict) else None
        if isinstance(err, dict):
            code = str(err.get("code", ""))
            message = str(err.get("message", message))
    except ValueError:
        pass
    cls = _BY_STATUS.get(status) or _BY_CODE.get(code) or ServerError
    return cls(message, status=status, code=code, body=doc if isinstance(doc, dict) else None)
