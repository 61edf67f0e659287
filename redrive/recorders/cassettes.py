"""Import VCR-style cassettes (YAML or JSON) of OpenAI / Anthropic traffic into a journal as a run.

Three on-disk dialects are read, from YAML (PyYAML, the ``cassettes`` extra:
``pip install 'redrive[cassettes]'``) or JSON (the standard library; vcrpy's
``serializer="json"``):

* classic vcrpy: ``response: {status: {code, message}, headers, body: {string}}``;
  the body is as it was on the wire (``!!binary`` gzip with ``Content-Encoding: gzip``);
* pydantic-ai's serializer: JSON bodies stored decoded under ``parsed_body``
  (request and response), non-JSON bodies under ``body.string``;
* vcrpy's older httpx stub: ``response: {status_code, http_version, content}``;
  the content is stored decoded (a ``Content-Encoding`` header is stale).

A body stored as sent is decoded by its ``Content-Encoding`` (stacked codings
too, the last applied first): every coding httpx decodes (``identity``,
``gzip``, ``deflate``; ``br`` with brotli installed; ``zstd`` with zstandard
installed). An unknown coding, or a body that is not what its coding says,
is refused with :class:`CassetteError` naming the interaction.

Which interactions are model calls: every one to ``api.openai.com`` or
``api.anthropic.com``, and on any other host (Azure OpenAI, Gemini's OpenAI
endpoint, OpenRouter, vLLM, Ollama...) one whose path has the shape of an
OpenAI endpoint (``.../chat/completions``, ``.../completions``,
``.../responses``, ``.../embeddings``, ``.../moderations``) or of an Anthropic
one (``.../v1/messages``, ``.../v1/complete``); the client's base URL is the
path before it. Any other interaction (a telemetry POST between model calls)
is skipped, and the run gets a note ``cassette: skipped interaction`` saying
which and why; a cassette without a single model call is refused.

Reading is bounded (:class:`CassetteLimits`): the file's size, the nesting
depth and the number of YAML aliases are capped while parsing (a safe loader
that counts them), the size of the data once aliases are expanded is capped
before anything walks it (a "billion laughs" alias bomb, or one large string
aliased a thousand times), and every response body is decoded only up to a
per-body limit and a limit over the whole cassette (a gzip bomb). Each limit
that is hit raises :class:`CassetteError` naming the limit, its value and the
interaction (or the line of the file), before the journal is touched.

A streamed response (``text/event-stream``) of a provider whose stream grammar
ends every complete stream with a final event (OpenAI chat ``data: [DONE]``,
Responses ``response.completed``/``failed``/``incomplete``, Anthropic
``message_stop``) that lacks it was cut off while recording: it is refused
naming the interaction and the missing event, as a live stream without its
final event is not a finished step either.

Each model call becomes one model step, stored exactly as
:func:`redrive.wrap` would have recorded it live (decoded body, scrubbed
headers, SSE events as chunks), so the run replays through the real SDK.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from .._runid import check_run_id
from ..replay import Run
from ..storage import Journal
from ._cassette_file import CassetteError, CassetteLimits, Interaction, load_cassette
from ._cassette_steps import PROVIDERS as PROVIDERS
from ._cassette_steps import Provider, model_call_of, step_of
from ._endpoints import ENDPOINTS
from ._recorder import HttpRecorder
from ._step import begin_model
from .anthropic import anthropic_view
from .openai import openai_view

__all__ = [
    "CassetteError",
    "CassetteLimits",
    "Interaction",
    "PreparedCassette",
    "import_cassette",
    "load_cassette",
    "model_call_of",
    "prepare_cassette",
]

# named (in reprs and tracebacks) and pickled under this module, where they are imported from
for _moved in (CassetteError, CassetteLimits, Interaction):
    _moved.__module__ = __name__

_VIEWS = {"openai": openai_view, "anthropic": anthropic_view}
#: The name of the note an import writes for each interaction it skips.
SKIPPED_NOTE = "cassette: skipped interaction"


@attrs.frozen(kw_only=True)
class PreparedCassette:
    """A cassette read, checked and converted, not yet written (:func:`prepare_cassette`).

    Attributes:
        path: the cassette file.
        plan: in order, ``("note", data)`` for a skipped interaction and
            ``("step", (name, request, response payload))`` for a model call.
    """

    path: Path
    plan: tuple[tuple[str, Any], ...]


def prepare_cassette(
    path: str | Path,
    *,
    provider: Provider | None = None,
    limits: CassetteLimits | None = None,
) -> PreparedCassette:
    """Read, bound-check and convert a cassette without touching any journal.

    Everything that can go wrong with the file goes wrong here, so a command
    can read the cassette before it opens a journal (an error, even running out
    of memory, is then never mistaken for the journal's).

    Args:
        path: the cassette (``.yaml``, ``.yml`` or ``.json``).
        provider: see :func:`import_cassette`.
        limits: the bounds (default :class:`CassetteLimits`).

    Returns:
        The :class:`PreparedCassette`, for :func:`import_cassette`.

    Raises:
        CassetteError, ImportError, ValueError, FileNotFoundError: as
            :func:`import_cassette` (except the run-exists case).
    """
    if provider is not None and provider not in ENDPOINTS:
        raise ValueError(f"provider must be 'openai' or 'anthropic', not {provider!r}")
    path = Path(path)
    limits = limits or CassetteLimits()
    interactions = load_cassette(path, limits=limits)
    plan: list[tuple[str, Any]] = []  # ("note", data) or ("step", (name, request, payload))
    used = [0]
    for i, item in enumerate(interactions):
        where = f"{path.name} interaction {i}"
        try:
            call = model_call_of(item, provider)
        except CassetteError as exc:
            raise CassetteError(f"{where}: {exc}") from None
        if call is None:
            reason = "not a model API call (no OpenAI or Anthropic endpoint in its path)"
            plan.append(("note", {"index": i, "request": item.label(), "reason": reason}))
        else:
            plan.append(("step", step_of(item, where, provider, limits=limits, used=used)))
    if not any(kind == "step" for kind, _ in plan):
        first = interactions[0]
        raise CassetteError(
            f"{path}: no interaction is a model API call; interaction 0 ({first.label()}) is "
            "not an OpenAI or Anthropic API host and has no OpenAI or Anthropic endpoint "
            "path (.../chat/completions, .../responses, .../v1/messages...)"
        )
    return PreparedCassette(path=path, plan=tuple(plan))


def import_cassette(
    path: str | Path | PreparedCassette,
    journal: Journal,
    run_id: str | None = None,
    *,
    provider: Provider | None = None,
    limits: CassetteLimits | None = None,
) -> str:
    """Import a cassette as a finished run whose steps replay through :func:`redrive.wrap`.

    Interactions that are no model API call (see the module docstring) are
    skipped; the run gets one note :data:`SKIPPED_NOTE` per skipped
    interaction, ``{"index", "request", "reason"}`` (``request`` is
    ``"METHOD URL"`` with secret query values hidden).

    Args:
        path: the cassette (``.yaml``, ``.yml`` or ``.json``), or one already
            read by :func:`prepare_cassette` (``provider`` and ``limits`` are then
            not used again).
        journal: where the run is written.
        run_id: the run's id (default ``"cassette:{file stem}"``).
        provider: ``"openai"`` or ``"anthropic"``: the API the cassette's
            other hosts speak (only that provider's path shapes are model
            calls there); default: each interaction's path shape says.
        limits: how much the cassette may make the importer read, expand and
            decode (default :class:`CassetteLimits`).

    Returns:
        The run id.

    Raises:
        CassetteError: the cassette cannot be read or converted (says why,
            naming the interaction: index, method and URL), holds no model
            call at all, is over a limit of ``limits`` (``CassetteError.limit``
            names it), holds a stream cut off before its final event, or a run
            with that id already exists in the journal. Nothing is written.
        ImportError: a YAML cassette without PyYAML installed.
        ValueError: ``provider`` is not ``"openai"``, ``"anthropic"`` or None, or
            ``run_id`` breaks the run-id rule (NUL, lone surrogate, too long).
    """
    prepared = (
        path
        if isinstance(path, PreparedCassette)
        else prepare_cassette(path, provider=provider, limits=limits)
    )
    path, plan = prepared.path, prepared.plan
    run_id = run_id or f"cassette:{path.stem}"
    if journal.get_run(check_run_id(run_id)) is not None:
        raise CassetteError(
            f"{path}: run {run_id!r} already exists in {journal.url}; pass another run_id"
        )
    with Run(journal, run_id, input={"cassette": path.name}) as run:
        for kind, data in plan:
            if kind == "note":
                run.note(SKIPPED_NOTE, data)
                continue
            name, request, payload = data
            family = name.partition(":")[0]
            recorder = HttpRecorder(provider=family, view=_VIEWS.get(family))
            step = begin_model(run, name, request, ignore=recorder.ignore)
            recorder.record(step, payload)  # as a live recording
    return run_id
