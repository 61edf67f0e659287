"""Run fingerprints: what shaped a run (entrypoint, app version, tool set, models, prompts).

Part of it is recorded when a run starts (in its ``run_start`` payload, field
``fingerprint``): the entrypoint, the application's version, redrive's version
and the tool set of the process (every ``@redrive.tool`` defined so far, each
as hashes of its signature, declaration and docstring). The rest is read from
the recorded steps when asked (:func:`read_fingerprint`): the model names and
the system-prompt hashes its model steps sent. No I/O here besides the one-off
``git rev-parse`` that finds a checkout's commit.
"""

from __future__ import annotations

import functools
import inspect
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from ..frames import Frame, Kind, fingerprint
from ._steps import StepReader

__all__ = [
    "APP_VERSION_ENV",
    "Fingerprint",
    "app_version",
    "current_tools",
    "read_fingerprint",
    "register_tool",
    "start_fingerprint",
]

#: Environment variable naming the application's version (a deploy sets it).
APP_VERSION_ENV = "REDRIVE_APP_VERSION"

#: Tool name -> ``{"sig", "decl", "doc"}`` hashes (16 hex each), for tools defined in this process.
_TOOLS: dict[str, dict[str, str]] = {}
_TOOLS_LOCK = threading.Lock()


def _hash(value: Any) -> str:
    return fingerprint(value)[:16]


def tool_digest(
    func: Callable[..., Any],
    *,
    restart_safe: bool,
    read_only: bool,
    declared: bool,
    has_recover: bool,
    retryable: Iterable[type[BaseException]],
) -> dict[str, str]:
    """Return the hashes of a tool: ``{"sig": ..., "decl": ..., "doc": ...}`` (16 hex each).

    ``sig`` covers the parameter names, kinds, defaults and annotations (as
    text); ``decl`` what ``@redrive.tool`` was told (restart safety, read-only,
    a ``recover()`` hook, retryable types); ``doc`` the docstring.
    """
    try:
        signature = str(inspect.signature(func))
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        signature = "?"
    decl = {
        "restart_safe": restart_safe,
        "read_only": read_only,
        "declared": declared,
        "recover": has_recover,
        "retryable": sorted(f"{t.__module__}.{t.__qualname__}" for t in retryable),
    }
    return {
        "sig": _hash(signature),
        "decl": _hash(decl),
        "doc": _hash(inspect.getdoc(func) or ""),
    }


def register_tool(name: str, digest: dict[str, str]) -> None:
    """Note a tool defined in this process (the latest definition of a name wins)."""
    with _TOOLS_LOCK:
        _TOOLS[name] = dict(digest)


def current_tools() -> dict[str, dict[str, str]]:
    """Return the tool set of this process: name -> hashes (see :func:`tool_digest`)."""
    with _TOOLS_LOCK:
        return {name: dict(d) for name, d in sorted(_TOOLS.items())}


@functools.lru_cache(maxsize=32)
def _git_commit(directory: str) -> str | None:
    """The commit checked out in ``directory``'s repository, or None (no git, no repository)."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stdout.strip()
    return text if done.returncode == 0 and len(text) == 40 else None


def _module_dir(entrypoint: str | None) -> str:
    """The directory of the entrypoint's module when it is imported, else the current one."""
    module = sys.modules.get((entrypoint or "").partition(":")[0]) if entrypoint else None
    path = getattr(module, "__file__", None)
    return os.path.dirname(os.path.realpath(path)) if path else os.getcwd()


def _package_version(entrypoint: str | None) -> str | None:
    top = (entrypoint or "").partition(":")[0].split(".")[0]
    if not top:
        return None
    import importlib.metadata  # a scan of sys.path: only when a new run has no other version

    try:
        return importlib.metadata.version(top)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def app_version(given: str | None, entrypoint: str | None) -> tuple[str | None, str]:
    """Return ``(version, source)`` of the application a run starts under.

    In order: ``given`` (the ``app_version=`` run option; source ``"option"``),
    ``$REDRIVE_APP_VERSION`` (``"env"``), the git commit of the entrypoint's
    checkout (``"git"``), the version of the entrypoint's installed
    distribution (``"package"``), else ``(None, "unknown")``.
    """
    if given:
        return given, "option"
    env = os.environ.get(APP_VERSION_ENV)
    if env:
        return env, "env"
    commit = _git_commit(_module_dir(entrypoint))
    if commit:
        return commit, "git"
    version = _package_version(entrypoint)
    if version:
        return version, "package"
    return None, "unknown"


def start_fingerprint(
    entrypoint: str | None, given_version: str | None, redrive_version: str
) -> dict[str, Any]:
    """Return the ``fingerprint`` field of a new run's ``run_start`` payload."""
    version, source = app_version(given_version, entrypoint)
    return {
        "entrypoint": entrypoint,
        "app_version": version,
        "app_version_source": source,
        "redrive": redrive_version,
        "tools": current_tools(),
    }


@attrs.frozen(kw_only=True)
class Fingerprint:
    """What shaped a run.

    Attributes:
        run_id: the run.
        entrypoint: ``"module:qualname"``, or None.
        app_version: the application's version when the run started, or None.
        app_version_source: ``"option"``, ``"env"``, ``"git"``, ``"package"``,
            ``"unknown"``, ``"omitted"`` (a pytest plugin recording, which leaves
            the version out so that re-recording after a commit changes nothing),
            or ``"unrecorded"`` (a run recorded before fingerprints).
        redrive: redrive's version when the run started (None: unrecorded).
        tools: tool name -> hashes (``sig``, ``decl``, ``doc``; 16 hex each).
        models: the model names its model steps asked for, in order of first use.
        prompts: hashes (16 hex) of the system prompts its model steps sent, in order.
        reasked: seqs of recorded steps superseded after the code changed
            (``ReplayPolicy(on_drift="continue_live")``): model steps re-asked
            live, and steps a shorter new path no longer asked for; in order.
    """

    run_id: str
    entrypoint: str | None = None
    app_version: str | None = None
    app_version_source: str = "unrecorded"
    redrive: str | None = None
    tools: dict[str, dict[str, str]] = attrs.field(factory=dict)
    models: tuple[str, ...] = ()
    prompts: tuple[str, ...] = ()
    reasked: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Return the fingerprint as plain JSON-ready data."""
        return {
            "run_id": self.run_id,
            "entrypoint": self.entrypoint,
            "app_version": self.app_version,
            "app_version_source": self.app_version_source,
            "redrive": self.redrive,
            "tools": self.tools,
            "models": list(self.models),
            "prompts": list(self.prompts),
            "reasked": list(self.reasked),
        }


def _body(args: Any) -> dict[str, Any]:
    """The request body of a recorded model step (an SDK exchange, or a callable's arguments)."""
    if isinstance(args, dict):
        body = args.get("body")
        if isinstance(body, dict):
            return body
        return args
    return {}


def _text(value: Any) -> Any:
    """A prompt's text, whatever its shape (a string, or a list of content blocks)."""
    if isinstance(value, list):
        return [b.get("text", b) if isinstance(b, dict) else b for b in value]
    return value


def system_prompts(args: Any) -> list[Any]:
    """Return the system prompts of a model request (OpenAI, Anthropic, Responses shapes).

    OpenAI chat: ``messages`` with role ``system`` or ``developer``; Anthropic:
    ``system``; the Responses API: ``instructions`` and ``input`` items with
    those roles. A model callable's arguments: a ``system`` argument.
    """
    body = _body(args)
    found: list[Any] = []
    for field in ("system", "instructions"):
        if body.get(field):
            found.append(_text(body[field]))
    for field in ("messages", "input"):
        items = body.get(field)
        if isinstance(items, list):
            for item in items:
                if isinstance(item, dict) and item.get("role") in ("system", "developer"):
                    found.append(_text(item.get("content")))
    return found


def model_name(step_name: str, args: Any) -> str:
    """Return the model a recorded model step asked for (its body's ``model``, else its name)."""
    model = _body(args).get("model")
    return model if isinstance(model, str) else step_name


def recorded_prompts(run_id: str, frames: Iterable[Frame]) -> list[tuple[int, str, Any]]:
    """The system prompts a run's model steps sent: ``(seq, hash, prompt)``, first sending each.

    ``hash`` is the 16-hex hash :attr:`Fingerprint.prompts` lists; ``prompt`` as
    :func:`system_prompts` reads it (a string, or a list of text blocks).

    Raises:
        JournalCorruptError: as :class:`~._steps.StepReader`.
    """
    found: dict[str, tuple[int, str, Any]] = {}
    for step in StepReader(run_id).read(frames):
        if step.kind == "model":
            for prompt in system_prompts(step.args):
                found.setdefault(_hash(prompt), (step.seq, _hash(prompt), prompt))
    return list(found.values())


def read_fingerprint(run_id: str, frames: Iterable[Frame]) -> Fingerprint:
    """Read a run's fingerprint from its frames (streamed; nothing is kept but the answer).

    Raises:
        JournalCorruptError: as :class:`~._steps.StepReader`.
    """
    reader = StepReader(run_id)
    models: dict[str, None] = {}
    prompts: dict[str, None] = {}
    reasked: list[int] = []

    def notes(frame: Frame) -> None:
        if frame.kind == Kind.NOTE.value and frame.name == REASKED:
            ref = frame.data().get("step")
            if isinstance(ref, int):
                reasked.append(ref)

    def watched() -> Iterable[Frame]:
        for frame in frames:
            notes(frame)
            yield frame

    for step in reader.read(watched()):
        if step.kind != "model":
            continue
        models.setdefault(model_name(step.name, step.args), None)
        for prompt in system_prompts(step.args):
            prompts.setdefault(_hash(prompt), None)
    start = reader.run_start or {}
    recorded = start.get("fingerprint")
    fp = recorded if isinstance(recorded, dict) else {}
    return Fingerprint(
        run_id=run_id,
        entrypoint=fp.get("entrypoint", start.get("entrypoint")),
        app_version=fp.get("app_version"),
        app_version_source=fp.get("app_version_source", "unrecorded"),
        redrive=fp.get("redrive", (start.get("flags") or {}).get("redrive")),
        tools=dict(fp.get("tools") or {}),
        models=tuple(models),
        prompts=tuple(prompts),
        reasked=tuple(reasked),
    )


#: Name of the note that records a model step re-asked live after its request drifted.
REASKED = "reasked"
