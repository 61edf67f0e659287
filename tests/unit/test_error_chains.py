"""A transient provider error leaves the run resumable however a framework wraps it (issue 27, 3).

The run's verdict is read from the whole tree under the exception that ended
its block: ``__cause__``, ``__context__`` (unless hidden with ``from None``)
and exception group members, with the real error classes of the SDKs and
frameworks (no stand-ins): transient anywhere in the tree, resumable; only
permanent errors, ``failed``. A tool's own exception is its recorded outcome.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import tempfile
from collections.abc import Callable

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive.recorders import classify_error

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

agents = pytest.importorskip("agents")
anthropic = pytest.importorskip("anthropic")
langchain_core = pytest.importorskip("langchain_core.exceptions")
litellm = pytest.importorskip("litellm")
openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")
pai = pytest.importorskip("pydantic_ai.exceptions")

REQUEST = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")


def _status(cls: type[Exception], status: int) -> Callable[[], Exception]:
    return lambda: cls(f"{status}", response=httpx.Response(status, request=REQUEST), body=None)


def _litellm(cls: type[Exception]) -> Callable[[], Exception]:
    return lambda: cls("provider said no", llm_provider="openai", model="gpt-4o")


def _validation() -> Exception:
    try:
        pydantic.TypeAdapter(int).validate_python("not a number")
    except pydantic.ValidationError as exc:
        return exc
    raise AssertionError("unreachable")


def _marked(make: Callable[[], Exception], flag: bool) -> Callable[[], Exception]:
    """As a wrapped client's error reaches the loop: with redrive's ``retryable`` mark."""

    def build() -> Exception:
        exc = make()
        exc.retryable = flag  # type: ignore[attr-defined]
        return exc

    return build


def _sqlite(sql: str) -> Callable[[], Exception]:
    """The real ``sqlite3.OperationalError`` of ``sql`` while another connection holds a lock."""

    def build() -> Exception:
        with tempfile.TemporaryDirectory() as where:
            path = os.path.join(where, "sessions.db")
            holder = sqlite3.connect(path, isolation_level=None)
            holder.execute("CREATE TABLE items (x)")
            holder.execute("BEGIN EXCLUSIVE")  # a writer in another process, say
            other = sqlite3.connect(path, timeout=0)
            try:
                other.execute(sql)
            except sqlite3.OperationalError as exc:
                exc.__traceback__ = None
                return exc
            finally:
                other.close()
                holder.close()
        raise AssertionError(f"{sql!r} did not fail")

    return build


#: name -> factory: what the SDKs and frameworks raise for a brief outage
TRANSIENT: dict[str, Callable[[], Exception]] = {
    "openai 429": _status(openai.RateLimitError, 429),
    "openai 503 (marked)": _marked(_status(openai.InternalServerError, 503), True),
    "openai connection": lambda: openai.APIConnectionError(request=REQUEST),
    "openai timeout": lambda: openai.APITimeoutError(request=REQUEST),
    "anthropic 529": _status(anthropic.InternalServerError, 529),
    "httpx connect": lambda: httpx.ConnectError("connection refused", request=REQUEST),
    "httpx read timeout": lambda: httpx.ReadTimeout("timed out", request=REQUEST),
    "pydantic-ai 503": lambda: pai.ModelHTTPError.for_category(
        pai.ModelUnavailableError, status_code=503, model_name="gpt-4o"
    ),
    "pydantic-ai connection": lambda: pai.ModelConnectionError("gpt-4o", "reset"),
    "litellm 429": _litellm(litellm.RateLimitError),
    "litellm 503": _litellm(litellm.ServiceUnavailableError),
    "litellm timeout": _litellm(litellm.Timeout),
    "litellm connection": _litellm(litellm.APIConnectionError),
    "sqlite database is locked": _sqlite("SELECT x FROM items"),
    "sqlite locked, no code": lambda: sqlite3.OperationalError("database is locked"),
}
#: name -> factory: errors that are the request's answer
PERMANENT: dict[str, Callable[[], Exception]] = {
    "openai 400": _status(openai.BadRequestError, 400),
    "openai 401 (recorded)": _marked(_status(openai.AuthenticationError, 401), False),
    "anthropic 400": _status(anthropic.BadRequestError, 400),
    "pydantic-ai 400": lambda: pai.ModelHTTPError(400, "gpt-4o"),
    "litellm 400": _litellm(litellm.BadRequestError),
    "validation error": _validation,
    "a plain bug": lambda: KeyError("order"),
    "sqlite no such table": lambda: sqlite3.OperationalError("no such table: items"),
    "sqlite readonly": lambda: sqlite3.OperationalError("attempt to write a readonly database"),
}
#: framework wrappers that say nothing of their own about being transient
WRAPPERS: dict[str, Callable[[], Exception]] = {
    "pydantic-ai UnexpectedModelBehavior": lambda: pai.UnexpectedModelBehavior("model failed"),
    "agents UserError": lambda: agents.exceptions.UserError("Error running tool"),
    "langchain LangChainException": lambda: langchain_core.LangChainException("chain failed"),
    "RuntimeError": lambda: RuntimeError("wrapped"),
}
#: how a wrapper holds what is under it
HOW = ("cause", "context", "group", "fallback group", "hidden")


def _wrap(inner: BaseException, how: str, wrapper: str) -> BaseException:
    """``inner`` under one more exception, as ``raise ... from``, ``except:`` or a group does."""
    if how in ("group", "fallback group"):
        group = pai.FallbackExceptionGroup if how == "fallback group" else ExceptionGroup
        return group("every attempt failed", [PERMANENT["openai 400"](), inner])  # type: ignore[list-item]
    outer = WRAPPERS[wrapper]()
    if how == "cause":  # raise outer from inner
        outer.__cause__, outer.__context__, outer.__suppress_context__ = inner, inner, True
    elif how == "context":  # raised while handling inner
        outer.__context__ = inner
    else:  # "hidden": raise outer from None, inside the handler of inner
        outer.__context__, outer.__suppress_context__ = inner, True
    return outer


CHAINS = st.lists(st.tuples(st.sampled_from(HOW), st.sampled_from(sorted(WRAPPERS))), max_size=4)


def _ended(exc: BaseException, is_async: bool) -> str:
    """The status a run is left in when ``exc`` ends its block."""
    journal = redrive.open_journal(":memory:")
    if is_async:

        async def main() -> None:
            async with redrive.run(journal, "r1"):
                raise exc

        with pytest.raises(BaseException):  # noqa: B017 - whatever the tree's top is
            asyncio.run(main())
    else:
        with pytest.raises(BaseException), redrive.run(journal, "r1"):  # noqa: B017
            raise exc
    record = journal.get_run("r1")
    assert record is not None
    return record.status


@given(
    transient=st.booleans(),
    leaf=st.data(),
    chain=CHAINS,
    is_async=st.booleans(),
)
def test_a_transient_error_anywhere_in_the_tree_leaves_the_run_resumable(
    transient: bool, leaf: st.DataObject, chain: list[tuple[str, str]], is_async: bool
) -> None:
    """Transient under any wrapping (not hidden by ``from None``): running; else failed."""
    errors = TRANSIENT if transient else PERMANENT
    exc: BaseException = errors[leaf.draw(st.sampled_from(sorted(errors)), label="leaf")]()
    for how, wrapper in chain:
        exc = _wrap(exc, how, wrapper)
    hidden = any(how == "hidden" for how, _ in chain)
    expected = "paused" if transient and not hidden else "failed"
    assert _ended(exc, is_async) == expected


@pytest.mark.parametrize("name", sorted(TRANSIENT))
def test_each_transient_error_is_classified_transient_on_its_own(name: str) -> None:
    """The table knows each library's outage errors (marked ones decide by their mark)."""
    exc = TRANSIENT[name]()
    assert getattr(exc, "retryable", None) is True or classify_error(exc) is True


@pytest.mark.parametrize("name", sorted(PERMANENT))
def test_no_permanent_error_is_classified_transient(name: str) -> None:
    """A 400, a 401, a validation error or a bug is never transient."""
    assert classify_error(PERMANENT[name]()) is not True


def test_an_unknown_libraries_status_error_is_not_read() -> None:
    """Only the listed libraries' statuses count: an unrelated 503 attribute says nothing."""

    class Unrelated(Exception):
        status_code = 503

    assert classify_error(Unrelated("x")) is None


# --- a tool's own exception -------------------------------------------------------------------


def _tool_run(declared: tuple[type[BaseException], ...], raised: Callable[[], Exception]) -> str:
    journal = redrive.open_journal(":memory:")
    calls: list[str] = []

    @redrive.tool(name="charge", restart_safe=False, retryable=declared)
    def charge(order: str) -> str:
        calls.append(order)
        raise raised()

    with pytest.raises(Exception), redrive.run(journal, "r1"):  # noqa: B017
        charge("o-1")
    assert calls == ["o-1"]
    record = journal.get_run("r1")
    assert record is not None
    return record.status


def test_a_tools_own_connection_error_is_its_recorded_outcome() -> None:
    """httpx.ConnectError from the tool's own request may have reached the service: failed."""
    assert _tool_run((), TRANSIENT["httpx connect"]) == "failed"


def test_a_tool_that_declares_its_connection_error_retryable_stays_resumable() -> None:
    """The tool knows its request is safe to send again (its idempotency key): resumable."""
    assert _tool_run((httpx.ConnectError,), TRANSIENT["httpx connect"]) == "paused"


def test_a_model_outage_inside_a_tool_leaves_it_retryable_through_a_framework_wrapper() -> None:
    """A sub-agent's wrapped client failed transiently (marked), under pydantic-ai's error."""

    def raised() -> Exception:
        outer = pai.ModelConnectionError("gpt-4o", "reset")
        outer.__cause__ = _marked(TRANSIENT["openai connection"], True)()
        return outer

    assert _tool_run((), raised) == "paused"
