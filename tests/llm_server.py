"""A scripted loopback server speaking the OpenAI chat-completions and Anthropic messages
APIs, so tests drive the real SDKs over real HTTP.

Each request takes the next behaviour from the script (or the default): a reply, a 429 with
Retry-After, a 5xx, or a hang. Every request is recorded with its credentials stripped.

    with LLMServer() as server:
        server.script(RateLimited(retry_after=2), Reply("hello", 12, 3))
        ... OpenAI(base_url=server.openai_base_url) ...
        assert len(server.requests) == 2
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

NO_CODE_TEXT = "I looked at the kernel and I think it is already as fast as it can be."
MALFORMED_DIFF_TEXT = "<<<<<<< SEARCH\n    y = x + 1\n=======\n    y = x + 2\n"  # no closing marker

SECRET_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "cookie"})


@dataclass(frozen=True)
class Reply:
    """A normal completion with this text and usage, after `delay` seconds."""

    text: str = "ok"
    input_tokens: int = 10
    output_tokens: int = 5
    delay: float = 0.0


@dataclass(frozen=True)
class RateLimited:
    """429 with a Retry-After header (omitted when None)."""

    retry_after: str | None = "1"


@dataclass(frozen=True)
class ServerError:
    """A status-code error (500 by default) in the API's error shape."""

    status: int = 500
    message: str = "internal server error"


@dataclass(frozen=True)
class Hang:
    """Answer nothing for `seconds`, or until `release()` (or the server closes) if None."""

    seconds: float | None = None


Behaviour = Reply | RateLimited | ServerError | Hang


def no_code() -> Reply:
    """A reply with prose and no code block."""
    return Reply(NO_CODE_TEXT)


def malformed_diff() -> Reply:
    """A reply whose edit is a SEARCH/REPLACE block missing its closing marker."""
    return Reply(MALFORMED_DIFF_TEXT)


@dataclass
class RecordedRequest:
    """One request as the server saw it, minus credentials (`auth` says which were sent)."""

    api: str  # "openai" or "anthropic"
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    auth: list[str] = field(default_factory=list)

    @property
    def prompt(self) -> str:
        """The text of every message (and the system prompt), joined."""
        parts = [self.body.get("system") or ""]
        for m in self.body.get("messages", []):
            c = m.get("content")
            parts += [c] if isinstance(c, str) else [b.get("text", "") for b in c or []]
        return "\n".join(p if isinstance(p, str) else str(p) for p in parts)


_ERROR_TYPES = {429: "rate_limit_error", 401: "authentication_error", 400: "invalid_request_error"}


class LLMServer:
    """The server; a context manager that serves from a daemon thread on 127.0.0.1:<free>.

    `api_key`, if set, must arrive as `Authorization: Bearer` or `x-api-key`; otherwise the
    request gets a 401 whose message echoes the presented key, as careless servers do.
    """

    def __init__(
        self,
        default: Behaviour | None = None,
        api_key: str | None = None,
        responder: Callable[[RecordedRequest], Behaviour] | None = None,
    ) -> None:
        self.default: Behaviour = default or Reply()
        self.responder = responder  # answers by the request, when nothing is scripted
        self.api_key = api_key
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._script: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url  # the anthropic SDK appends /v1/messages itself

    def script(self, *behaviours: Behaviour) -> None:
        """Queue behaviours for the next requests, in order; then the default applies."""
        with self._lock:
            self._script.extend(behaviours)

    def release(self) -> None:
        """Let every `Hang()` (now and later) end."""
        self._released.set()

    def __enter__(self) -> LLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    # -- called from handler threads

    def _next(self, request: RecordedRequest) -> Behaviour:
        with self._lock:
            self.requests.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self._script:
                return self._script.popleft()
        return self.responder(request) if self.responder else self.default

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _wait(self, hang: Hang) -> None:
        self._released.wait(hang.seconds)

    def _new_id(self) -> int:
        return next(self._ids)


def _handler(server: LLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

        def do_POST(self) -> None:
            path = self.path.split("?")[0]
            if path in ("/v1/chat/completions", "/chat/completions"):
                api = "openai"
            elif path in ("/v1/messages", "/messages"):
                api = "anthropic"
            else:
                self._send(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
                return
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            keys = self._presented_keys()
            request = RecordedRequest(
                api=api,
                path=path,
                headers={
                    k.lower(): v for k, v in self.headers.items() if k.lower() not in SECRET_HEADERS
                },
                body=body,
                auth=sorted(keys),
            )
            behaviour = server._next(request)
            try:
                if server.api_key is not None and server.api_key not in keys.values():
                    shown = ", ".join(keys.values()) or "none"
                    self._error(api, 401, f"Incorrect API key provided: {shown}")
                else:
                    self._behave(api, body, behaviour)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout); nothing to answer
            finally:
                server._done()

        def _presented_keys(self) -> dict[str, str]:
            keys = {}
            bearer = self.headers.get("authorization", "")
            if bearer.lower().startswith("bearer "):
                keys["bearer"] = bearer[7:]
            if self.headers.get("x-api-key"):
                keys["x-api-key"] = self.headers["x-api-key"]
            return keys

        def _behave(self, api: str, body: dict[str, Any], behaviour: Behaviour) -> None:
            if isinstance(behaviour, Hang):
                server._wait(behaviour)
                self._error(api, 503, "released after hanging")
            elif isinstance(behaviour, RateLimited):
                headers = (
                    {} if behaviour.retry_after is None else {"Retry-After": behaviour.retry_after}
                )
                self._error(api, 429, "rate limit reached", headers)
            elif isinstance(behaviour, ServerError):
                self._error(api, behaviour.status, behaviour.message)
            else:
                if behaviour.delay:
                    time.sleep(behaviour.delay)
                self._send(200, _reply(api, body.get("model", ""), behaviour, server._new_id()))

        def _error(
            self, api: str, status: int, message: str, headers: dict[str, str] | None = None
        ) -> None:
            kind = _ERROR_TYPES.get(
                status, "api_error" if status >= 500 else "invalid_request_error"
            )
            if api == "openai":
                payload = {"error": {"message": message, "type": kind, "param": None, "code": None}}
            else:
                payload = {"type": "error", "error": {"type": kind, "message": message}}
            self._send(status, payload, headers)

        def _send(
            self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
        ) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _reply(api: str, model: str, reply: Reply, n: int) -> dict[str, Any]:
    """A success body in the API's real shape, so the SDKs parse it."""
    if api == "openai":
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": reply.input_tokens,
                "completion_tokens": reply.output_tokens,
                "total_tokens": reply.input_tokens + reply.output_tokens,
            },
        }
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": reply.text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
    }
