"""A saved run's entrypoint, found and called again.

What ``redrive check``, ``what-changed``, ``check --update`` and ``recover`` share:
the entrypoint imported from its ``module:qualname``, the recorded input turned
into its arguments, and the call inside a run's block on a private copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .replay import Run
from .storage import Journal, MemoryJournal, copy_run

__all__ = ["call_args", "drive", "import_paths", "private_copy", "resolve"]


def resolve(entrypoint: str) -> Callable[..., Any]:
    """Import the function ``"module:qualname"`` names (a ``@durable`` one unwrapped).

    Raises:
        ValueError: not ``module:qualname``, or a function defined inside another.
        ImportError, AttributeError: the module or name cannot be found.
        TypeError: what it names is not callable.
    """
    module_name, _, qualname = entrypoint.partition(":")
    if not module_name or not qualname:
        raise ValueError(f"entrypoint {entrypoint!r} is not 'module:qualname'")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        if part == "<locals>":
            raise ValueError(
                f"entrypoint {entrypoint!r} is a function defined inside another one; only "
                "module-level functions can be re-driven by a check"
            )
        obj = getattr(obj, part)
    func = getattr(obj, "__wrapped_durable__", None) or inspect.unwrap(obj)
    if not callable(func):
        raise TypeError(f"entrypoint {entrypoint!r} is not callable")
    return func  # type: ignore[no-any-return]


def call_args(func: Callable[..., Any], given: Any) -> tuple[list[Any], dict[str, Any]]:
    """Turn a run's recorded input (a map of argument names) into ``func``'s call arguments.

    Raises:
        TypeError: the input is not a map, or names a parameter ``func`` has no more.
    """
    if given is None:
        return [], {}
    if not isinstance(given, dict):
        raise TypeError(f"the recorded input is a {type(given).__name__}, not a map of arguments")
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    params = inspect.signature(func).parameters
    for name, value in given.items():
        param = params.get(name)
        if param is None:
            raise TypeError(f"the current entrypoint has no parameter {name!r} (recorded input)")
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            args.extend(value)
        elif param.kind is inspect.Parameter.VAR_KEYWORD:
            kwargs.update(value)
        elif param.kind is inspect.Parameter.POSITIONAL_ONLY:
            args.append(value)
        else:
            kwargs[name] = value
    return args, kwargs


def private_copy(journal: Journal, run_id: str) -> MemoryJournal:
    """Copy run ``run_id`` into a new memory journal named as its source.

    Named as its source, so the commands a report suggests (``redrive show``) work on it.
    """
    from .storage import load_checked
    from .storage.rdj import RdjJournal

    copy = MemoryJournal(journal.url)
    record = journal.get_run(run_id)
    if isinstance(journal, RdjJournal) and record is not None:  # its frames are checked
        load_checked(record, tuple(journal.frames(run_id)), copy)
    else:
        copy_run(journal, run_id, copy)
    return copy


@contextlib.contextmanager
def import_paths(paths: Sequence[str]) -> Iterator[None]:
    """Put ``paths`` first on ``sys.path`` for the block (the project's code to import)."""
    added = [p for p in paths if p not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for p in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(p)


def drive(run: Run, func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Call ``func(*args, **kwargs)`` inside ``run``'s block (``async with`` for a coroutine)."""
    if inspect.iscoroutinefunction(func):

        async def go() -> Any:
            async with run:
                return await func(*args, **kwargs)

        return asyncio.run(go())
    with run:
        return func(*args, **kwargs)
