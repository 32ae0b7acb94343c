"""Write Plinth tools in Python with little ceremony.

A tool is ``app.py`` defining ``class WitWorld(wit_world.WitWorld)`` with the
world's exports (``call``, and optionally ``describe``), built by
``plinth pack`` with componentize-py, which puts this module beside it. Its
world must ``include plinth:tool/imports@0.1.0;`` (log, secrets, config) and,
to reach a backend, ``import wasi:http/outgoing-handler@0.2.12;``::

    import wit_world
    from wit_world import Input, Output
    from plinth_sdk import ToolError, config, http, tool

    class WitWorld(wit_world.WitWorld):
        @tool
        def call(self, input: Input) -> Output:
            base = config.require("backend-url")
            places = http.get(f"{base}/v1/geocode?name={http.quote(input.city)}").json()
            if not places["results"]:
                raise ToolError(f"no city called `{input.city}` is known",
                                additional_prompt_content="Ask the user to check the spelling.")
            ...

How componentize-py (0.25) maps Python onto the component: records are
dataclasses with snake_case fields, enum cases ``Enum`` members in
CAPITALS (``Units.CELSIUS``), ``option<T>`` the value or ``None``. Returning
a value is ``ok(output)``; ``@tool`` turns a raised ``ToolError`` into
``err(tool-error)``; any other exception is a bug and ends the call as a
trap (like a panic in Rust), its traceback in the host's logs.

The sandbox gives a tool no files, no sockets, no threads and no
environment: outbound HTTP goes through ``http`` to the hosts the tool's
``plinth.toml`` allows, configuration through ``config`` and ``secrets``.
"""

import functools
import json as _json
import urllib.parse
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, TypeVar, Union

import componentize_py_types

__all__ = ["ToolError", "tool", "describe", "config", "secrets", "log", "http"]


def _load_bindings() -> Dict[str, Any]:
    """The generated modules of the interfaces the tool's world imports.

    They are imported here, when the tool's code imports this module: that
    happens while componentize-py builds the tool, and only what is imported
    then is in the component (it has no files to import from later).
    """
    import importlib

    found = {}
    # componentize-py prefixes a module's name with its package's when two
    # imported interfaces share a name (`types`).
    for name in ("plinth_tool_types", "types", "log", "secrets", "store", "wasi_http_types", "outgoing_handler"):
        module = f"wit_world.imports.{name}"
        try:
            found[name] = importlib.import_module(module)
        except ModuleNotFoundError as error:
            if error.name != module:
                raise
    return found


_BINDINGS = _load_bindings()


def _bindings(*names: str) -> Any:
    """The generated module for an interface, by the names it may have."""
    for name in names:
        if name in _BINDINGS:
            return _BINDINGS[name]
    raise ToolError(
        "the tool is built without an interface it uses",
        developer_message=f"the tool's world does not import the interface behind {names[0]}: add "
        "`include plinth:tool/imports@0.1.0;` (and `import wasi:http/outgoing-handler@0.2.12;` "
        "for outbound HTTP) to wit/world.wit",
    )


class ToolError(Exception):
    """A failure the tool reports to its caller, shaped for an LLM.

    Raise it from a method decorated with ``@tool``; the host answers A2T
    ``422``, or ``503`` with ``Retry-After`` when ``can_retry`` is set.
    """

    def __init__(
        self,
        message: str,
        *,
        developer_message: Optional[str] = None,
        can_retry: bool = False,
        retry_after_ms: Optional[int] = None,
        additional_prompt_content: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        #: What went wrong, in words the LLM can act on.
        self.message = message
        #: Detail for the developer of the calling agent (not for the LLM).
        self.developer_message = developer_message
        #: Whether the same call may succeed if tried again later.
        self.can_retry = can_retry or retry_after_ms is not None
        #: How long to wait before trying again, in milliseconds.
        self.retry_after_ms = None if retry_after_ms is None else max(0, int(retry_after_ms))
        #: Extra text the executor may add to the LLM's prompt.
        self.additional_prompt_content = additional_prompt_content

    @classmethod
    def retry(cls, message: str, after_ms: int, **details: Any) -> "ToolError":
        """A temporary failure: the same call may succeed after ``after_ms``."""
        return cls(message, can_retry=True, retry_after_ms=after_ms, **details)

    def _to_wit(self) -> Any:
        types = _bindings("plinth_tool_types", "types")
        return types.ToolError(
            message=self.message,
            developer_message=self.developer_message,
            can_retry=self.can_retry,
            retry_after_ms=self.retry_after_ms,
            additional_prompt_content=self.additional_prompt_content,
        )


F = TypeVar("F", bound=Callable[..., Any])


def tool(method: F) -> F:
    """Wraps an export (``call``, ``describe``): a ``ToolError`` it raises
    becomes ``err(tool-error)``; any other exception ends the call as a
    trap, its traceback in the host's logs."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except ToolError as error:
            raise componentize_py_types.Err(error._to_wit()) from None

    return wrapper  # type: ignore[return-value]


def describe(summary: str, facts: Union[Dict[str, str], Iterable[Tuple[str, str]]] = ()) -> Any:
    """A call's description for the human who confirms it (the optional
    ``describe`` export): a sentence or two, and named facts such as
    ``{"Total price": "360 USD"}``, signed into the CHEQ and shown on the
    confirmation page."""
    types = _bindings("plinth_tool_types", "types")
    pairs = facts.items() if isinstance(facts, dict) else facts
    return types.CallDescription(summary=summary, facts=[types.Fact(name=n, value=v) for n, v in pairs])


class config:
    """Per-tool configuration set by the operator (``wasi:config/store``)."""

    @staticmethod
    def get(key: str) -> Optional[str]:
        """The value of ``key``, or ``None`` when the operator did not set it."""
        try:
            return _bindings("store").get(key)
        except componentize_py_types.Err as error:
            raise ToolError.retry(
                "the tool's configuration could not be read", 1000, developer_message=repr(error.value)
            ) from None

    @staticmethod
    def require(key: str) -> str:
        """The value of ``key``; a clear, non-retryable error when it is missing."""
        value = config.get(key)
        if value is None:
            raise ToolError(
                "the tool is not configured on this server", developer_message=f"config key `{key}` is not set"
            )
        return value


class secrets:
    """Secrets the operator stores for the tool (declare their ids under
    ``secrets`` in ``plinth.toml``)."""

    @staticmethod
    def get(id: str) -> Optional[str]:
        """The secret's value, or ``None`` when it is not declared or not set."""
        return _bindings("secrets").get(id)

    @staticmethod
    def require(id: str) -> str:
        """The secret's value; a clear, non-retryable error when it is missing."""
        value = secrets.get(id)
        if value is None:
            raise ToolError(
                "the tool is not configured on this server",
                developer_message=f"secret `{id}` is not set (or not declared in plinth.toml)",
            )
        return value


class log:
    """Log lines that reach the host's structured logs, tagged with the
    tool, its version and the call id."""

    @staticmethod
    def _write(level: str, message: str) -> None:
        module = _bindings("log")
        module.write(getattr(module.Level, level), message)

    @staticmethod
    def debug(message: str) -> None:
        log._write("DEBUG", message)

    @staticmethod
    def info(message: str) -> None:
        log._write("INFO", message)

    @staticmethod
    def warn(message: str) -> None:
        log._write("WARN", message)

    @staticmethod
    def error(message: str) -> None:
        log._write("ERROR", message)


class Response:
    """An HTTP response whose body has been read in full."""

    def __init__(self, status: int, headers: List[Tuple[str, bytes]], body: bytes) -> None:
        #: The HTTP status code.
        self.status = status
        #: The response headers, names in lower case.
        self.headers = {name.lower(): value.decode("latin-1") for name, value in headers}
        #: The body.
        self.body = body

    @property
    def ok(self) -> bool:
        """Whether the status is 2xx."""
        return 200 <= self.status < 300

    def text(self) -> str:
        """The body as UTF-8 text."""
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON; a ``ToolError`` when it is not."""
        try:
            return _json.loads(self.body)
        except ValueError as error:
            raise ToolError(
                "the backend answered something the tool could not read",
                developer_message=f"the body is not JSON: {error}",
            ) from None


class http:
    """Blocking outbound HTTP over ``wasi:http/outgoing-handler``.

    The host lets a tool reach only the hosts its ``plinth.toml`` allows;
    anything else, like a connection that fails, raises a ``ToolError``
    (retryable when a retry may help).
    """

    #: Percent-encodes a value for a URL's query or path.
    quote = staticmethod(urllib.parse.quote)

    @staticmethod
    def get(url: str, headers: Optional[Dict[str, str]] = None) -> Response:
        """``GET url``."""
        return http.request("GET", url, headers=headers)

    @staticmethod
    def post(url: str, json: Any = None, body: Optional[bytes] = None, headers: Optional[Dict[str, str]] = None) -> Response:
        """``POST url`` with a JSON body (``json=``) or raw bytes (``body=``)."""
        return http.request("POST", url, json=json, body=body, headers=headers)

    @staticmethod
    def request(
        method: str,
        url: str,
        json: Any = None,
        body: Optional[bytes] = None,
        headers: Optional[Dict[str, str]] = None,
    ) -> Response:
        """Sends one request and reads the whole response."""
        types = _bindings("wasi_http_types", "types")
        handler = _bindings("outgoing_handler")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ToolError("the tool built an invalid URL", developer_message=f"not an http(s) URL: {url!r}")
        fields = [(name.lower(), value.encode()) for name, value in (headers or {}).items()]
        if json is not None:
            body = _json.dumps(json).encode()
            if not any(name == "content-type" for name, _ in fields):
                fields.append(("content-type", b"application/json"))
        try:
            request = types.OutgoingRequest(types.Fields.from_list(fields))
        except componentize_py_types.Err as error:
            raise ToolError("the tool built an invalid request", developer_message=f"headers: {error.value!r}") from None
        request.set_method(_method(types, method))
        request.set_scheme(types.Scheme_Https() if parts.scheme == "https" else types.Scheme_Http())
        request.set_authority(parts.netloc)
        request.set_path_with_query(parts.path + (f"?{parts.query}" if parts.query else "") or "/")
        outgoing = request.body()
        try:
            future = handler.handle(request, None)
        except componentize_py_types.Err as error:
            raise _failed(url, error.value) from None
        if body:
            # The stream is the body's child: it must be gone before the
            # body is finished.
            with outgoing.write() as stream:
                for start in range(0, len(body), 4096):
                    stream.blocking_write_and_flush(body[start : start + 4096])
        types.OutgoingBody.finish(outgoing, None)
        future.subscribe().block()
        answer = future.get()
        if answer is None or isinstance(answer, componentize_py_types.Err):
            raise ToolError.retry("the backend did not answer", 1000, developer_message=f"no response from {url}")
        inner = answer.value
        if isinstance(inner, componentize_py_types.Err):
            raise _failed(url, inner.value)
        response = inner.value
        status, response_headers = response.status(), response.headers().entries()
        chunks = []
        with response.consume() as incoming, incoming.stream() as stream:
            while True:
                try:
                    chunks.append(stream.blocking_read(65536))
                except componentize_py_types.Err:  # closed: the whole body is read
                    break
        return Response(status, response_headers, b"".join(chunks))


def _method(types: Any, method: str) -> Any:
    named = {
        "GET": types.Method_Get,
        "HEAD": types.Method_Head,
        "POST": types.Method_Post,
        "PUT": types.Method_Put,
        "DELETE": types.Method_Delete,
        "OPTIONS": types.Method_Options,
        "PATCH": types.Method_Patch,
    }.get(method.upper())
    return named() if named else types.Method_Other(method)


def _failed(url: str, code: Any) -> ToolError:
    """A request that got no answer: refused by the host (an undeclared
    host) or failed on the way. Retrying helps only the second."""
    detail = type(code).__name__.split("_", 1)[-1]
    if detail in ("HttpRequestDenied", "DestinationIpProhibited"):
        return ToolError("the tool may not reach this address", developer_message=f"{url}: refused by the host ({detail})")
    return ToolError.retry("the backend could not be reached", 1000, developer_message=f"{url}: {detail}")
