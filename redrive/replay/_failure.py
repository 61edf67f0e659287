"""Whether an exception that ended a run's block leaves the run resumable or ends it ``failed``.

An exception reaches the end of a run's block as the loop's framework raised
it: pydantic-ai raises its ``ModelUnavailableError`` *from* the OpenAI SDK's
``InternalServerError``, litellm its ``RateLimitError`` while handling the
SDK's, ``FallbackModel`` an ``ExceptionGroup`` of every model's error. So the
verdict is read from the whole tree under the exception (:func:`under`):
its ``__cause__``, its ``__context__`` (unless the raiser hid it with ``raise
... from``, which sets ``__suppress_context__``) and the members of an
``ExceptionGroup``, in that order, each exception once.

Each exception in the tree is read by :func:`verdict`:

1. a redrive error decides (``ReplayError``: the step it stopped never
   finished, so resumable; ``TerminalRunError``: not), and so does a tool
   step's recorded mark (the tool's outcome: resumable only when the tool or
   the run declared the error retryable);
2. a type the run lists in ``retryable=`` is transient;
3. a boolean ``retryable`` attribute decides: the recorders set it from
   provider knowledge (``True``: a live transient error, never journaled;
   ``False``: a recorded error, replayed the same every time);
4. an ``is_retryable`` of True (a framework's own flag: LangChain's
   ``ModelError`` subclasses carry it) is transient;
5. the error classifier (:func:`set_error_classifier`): provider and framework
   knowledge, which ``redrive.recorders`` installs (a table of status codes and
   exception class names by module, read without importing any framework).

What decides (1 to 3) is final for the tree below it too: whoever marked an
exception knew what is under it. Otherwise the exceptions under it are read.
The run stays resumable when some exception of the tree is transient, unless a
``TerminalRunError`` is in it (the run cannot continue); otherwise it ends
``failed``. The engine knows no SDK: marks and the classifier are data it reads.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ReplayError, TerminalRunError
from ._toolspec import tool_error_retryable

__all__ = [
    "ErrorClassifier",
    "leaves_resumable",
    "set_error_classifier",
    "tool_error_is_retryable",
    "under",
    "verdict",
]

#: ``classify(exc) -> True`` (transient), ``False`` (permanent) or ``None`` (does not know).
ErrorClassifier = Callable[[BaseException], "bool | None"]

#: The most exceptions read under one (a tree deeper than this is cut, read as unknown).
MAX_NODES = 256

_classifier: ErrorClassifier | None = None


def set_error_classifier(classifier: ErrorClassifier | None) -> None:
    """Install the classifier of exceptions no redrive mark decides (None removes it).

    ``redrive.recorders`` installs its provider and framework table at import
    (``redrive.recorders.classify_error``); the engine reads it as data, one
    exception at a time, and never imports what it names.

    Args:
        classifier: ``classify(exc)`` returning True for a transient error, False for
            a permanent one, None when it does not know the exception.
    """
    global _classifier
    _classifier = classifier


def under(exc: BaseException) -> list[BaseException]:
    """The exceptions directly under ``exc``, in reading order.

    Returns:
        Its ``__cause__``; its ``__context__`` unless the raiser hid it
        (``__suppress_context__``, set by ``raise ... from``); the members of an
        exception group.
    """
    below: list[BaseException] = []
    if exc.__cause__ is not None:
        below.append(exc.__cause__)
    if exc.__context__ is not None and not exc.__suppress_context__:
        below.append(exc.__context__)
    if isinstance(exc, BaseExceptionGroup):
        below.extend(exc.exceptions)
    return below


def verdict(
    exc: BaseException,
    declared: tuple[type[BaseException], ...] = (),
    *,
    providers: bool = True,
) -> tuple[bool | None, bool]:
    """Read one exception: ``(transient?, decided by a redrive mark?)``.

    In this order: a redrive error; a tool step's recorded mark; a type in
    ``declared`` (it wins over a ``retryable`` mark: the run asked for it); the
    ``retryable`` mark; a framework's ``is_retryable`` flag; the classifier.

    Args:
        exc: one exception of the tree.
        declared: the run's (and a tool's) ``retryable=`` exception types.
        providers: also ask the installed classifier (:func:`set_error_classifier`).

    Returns:
        ``(True, _)`` transient, ``(False, _)`` permanent, ``(None, False)``
        unknown; the second item is True when a redrive mark decided (the
        tree below is then not read).
    """
    if isinstance(exc, ReplayError):
        return not isinstance(exc, TerminalRunError), True
    tool = tool_error_retryable(exc)
    if tool is not None:
        return tool, True
    if declared and isinstance(exc, declared):
        return True, True
    flag = getattr(exc, "retryable", None)
    if isinstance(flag, bool):
        return flag, True
    if getattr(exc, "is_retryable", None) is True:  # a framework's own flag (LangChain's)
        return True, False
    classifier = _classifier if providers else None
    return (classifier(exc) if classifier is not None else None), False


def leaves_resumable(
    exc: BaseException, declared: tuple[type[BaseException], ...] = (), *, providers: bool = True
) -> bool:
    """Whether the run stays resumable after ``exc`` ended its block (see the module doc).

    Args:
        exc: the exception that ended the block.
        declared: the run's ``retryable=`` exception types (any exception of the tree).
        providers: also ask the installed classifier; False for a tool's own
            exception (see :func:`tool_error_is_retryable`).

    Returns:
        True when some exception of the tree is transient and none is a
        ``TerminalRunError``.
    """
    transient = False
    seen: set[int] = set()
    stack = [exc]
    while stack and len(seen) < MAX_NODES:  # depth first, each exception once
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, TerminalRunError):
            return False
        found: bool | None
        if not providers and isinstance(node, ReplayError):
            found, decided = False, True  # a redrive error inside a tool body: its outcome
        else:
            found, decided = verdict(node, declared, providers=providers)
        transient = transient or found is True
        if not decided:  # a redrive mark decides for the tree below it
            stack.extend(reversed(under(node)))
    return transient


def tool_error_is_retryable(exc: BaseException, declared: tuple[type[BaseException], ...]) -> bool:
    """Whether a tool body's exception is a retryable ``tool_error`` (the operation stays open).

    A tool's exception is the tool's outcome: recorded, and replayed as such.
    It is retryable when its type (or one under it: a framework's wrapper of
    it) is among ``declared`` (the tool's and the run's ``retryable=``), or
    when redrive marked it or one under it transient: a model call inside the
    tool failed through a recorder and was not journaled. Provider knowledge
    alone (an ``httpx.ConnectError`` from the tool's own request) does not make
    it retryable: the request may have reached the service, and only the tool
    knows whether sending it again is safe (declare the type to say so).

    Args:
        exc: what the tool body raised.
        declared: the tool's and the run's ``retryable=`` exception types.

    Returns:
        True for a retryable tool error.
    """
    return leaves_resumable(exc, declared, providers=False)
