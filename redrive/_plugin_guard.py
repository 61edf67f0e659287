"""The pytest plugin's network guard: httpx requests outside recorded steps raise NetworkBlocked.

Part of :mod:`redrive.pytest_plugin` (see its docstring); imports nothing of
redrive's engine until a guarded test runs. Nor does it import httpx: a
transport module already imported is patched when the guard starts, and one
imported while the guard is on is patched as its import ends (an import hook),
so a suite that never uses httpx does not pay for importing it.

It guards where a request leaves the process: the connection pools of
httpcore (httpx's) and httpcore2 (httpx2's), not httpx's ``HTTPTransport``
above them. A mock that answers at or above the pool (respx's default mocker
patches the pool, pytest-httpx the transport, ``MockTransport`` replaces it)
answers first and is not refused; what such a mock passes through still is.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

_BLOCKED = pytest.StashKey[list[str]]()
#: the modules whose connection pools the guard patches (see the module docstring)
_HTTPX_MODULES = ("httpcore", "httpcore2")


class NetworkBlocked(BaseException):
    """An HTTP request a test made outside redrive's recorded steps, under the network guard.

    A ``BaseException``, so SDKs that retry on ``Exception`` (and the code under
    test) do not turn it into a connection error and retry; the test fails
    even if something swallows it, since the guard also records the request.
    """


@contextlib.contextmanager
def _network_guard(nodeid: str, blocked: list[str], on: bool) -> Iterator[None]:
    """While on, an httpx request that is not a recorded step's live call raises NetworkBlocked.

    Args:
        nodeid: what the message names (a test id, or a fixture of a wider scope).
        blocked: each refused request is appended here (``"GET http://..."``), so
            the test or fixture fails even when its code swallowed the exception.
        on: whether to guard at all.
    """
    if not on:
        yield
        return
    from redrive.replay import sends_live

    saved: list[tuple[type, str, Any]] = []

    def guard(cls: type, attr: str, original: Any, is_async: bool) -> Any:
        def refuse(request: Any) -> NetworkBlocked:
            method, url = request.method, request.url  # bytes and a URL in httpcore's
            method = method.decode("ascii") if isinstance(method, bytes) else method
            if hasattr(type(url), "__bytes__"):
                url = bytes(url).decode("ascii", "replace")
            what = f"{method} {url}"
            blocked.append(what)
            return NetworkBlocked(
                f"redrive: {nodeid} sent {what} outside recorded steps with the network "
                "guard on (--redrive-block-network, block_network=True or record mode none)"
            )

        # named as the method it stands in for: a mock patching the pool over the guard
        # (respx) refuses to patch a method whose name is not the one it targets
        if is_async:

            @functools.wraps(original)
            async def ahandle(self: Any, request: Any) -> Any:
                if not sends_live():
                    raise refuse(request)
                return await original(self, request)

            return ahandle

        @functools.wraps(original)
        def handle(self: Any, request: Any) -> Any:
            if not sends_live():
                raise refuse(request)
            return original(self, request)

        return handle

    def patch(module: types.ModuleType) -> None:
        for cls_name, attr, is_async in (
            ("ConnectionPool", "handle_request", False),
            ("AsyncConnectionPool", "handle_async_request", True),
        ):
            cls = getattr(module, cls_name, None)
            if cls is None:
                continue
            original = cls.__dict__.get(attr)
            saved.append((cls, attr, original))
            setattr(cls, attr, guard(cls, attr, getattr(cls, attr), is_async))

    for name in _HTTPX_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            patch(module)
    hook = _PatchOnImport([n for n in _HTTPX_MODULES if n not in sys.modules], patch)
    sys.meta_path.insert(0, hook)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(hook)
        for cls, attr, original in reversed(saved):
            if original is None:
                delattr(cls, attr)
            else:
                setattr(cls, attr, original)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` finder: the named modules, when imported, are handed to ``patch``.

    It finds nothing itself: it asks the finders after it for the module's
    spec and wraps the loader, so ``patch(module)`` runs right after the
    module's code (a module that fails to import is never patched).
    """

    def __init__(self, names: Sequence[str], patch: Callable[[types.ModuleType], None]) -> None:
        self.names = set(names)
        self.patch = patch
        self.finding = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        """The spec the other finders give for a watched module, its loader wrapped; else None."""
        if fullname not in self.names or self.finding:
            return None
        self.finding = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.finding = False
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader, self.patch)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    """A module's own loader, then ``patch(module)`` (see :class:`_PatchOnImport`)."""

    def __init__(self, inner: importlib.abc.Loader, patch: Callable[[types.ModuleType], None]):
        self.inner = inner
        self.patch = patch

    def __getattr__(self, name: str) -> Any:
        # get_source (tracebacks), get_resource_reader, is_package...: the module's own loader's
        return getattr(self.inner, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        """As the module's own loader."""
        return self.inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        """Run the module's code with its own loader, then patch it."""
        self.inner.exec_module(module)
        self.patch(module)
