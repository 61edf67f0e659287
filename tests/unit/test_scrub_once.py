"""A step's request or arguments are scrubbed once (issue 26 item 6): the frame holds the bytes
that a second walk of the scrubber would have written.

The writer keeps what ``prepare`` scrubbed (a model request, maybe with its lists
as prefix references, a tool call's arguments) instead of walking it again when
the frame is made. That is exact when a second walk changes nothing; these
properties check it on every frame, for random requests, arguments and responses
holding credential fields, secret-looking text, JSON texts, header pairs, event
streams, signed content and odd values, under random ``redact=`` and ``keep=``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from redrive._canonical import canonical, pack_tree
from redrive.frames import Frame, Kind
from redrive.replay._policy import scrubber as make_scrubber
from redrive.storage import MemoryJournal
from tests.conftest import examples

_KEYS = st.sampled_from(
    [
        "api_key",
        "Authorization",
        "password",
        "db_password",
        "headers",
        "chunks",
        "token",
        "max_tokens",
        "type",
        "thinking",
        "signature",
        "encrypted_content",
        "content",
        "messages",
        "user",
        "note",
        "logprobs",
        "data",
        "q",
    ]
) | st.text(alphabet="abkey_-", max_size=6)

_TEXTS = st.one_of(
    st.sampled_from(
        [
            "sk-proj-abcdefghijkmnopqrstuvwxyzABCD",
            "Bearer 9abcdefghijk0123",
            "https://user:hunter2pass@h.example/p?access_token=abc123def&b=2",
            "[REDACTED]",
            '{"api_key": "Qz7secretvalue", "n": 1}',
            '[{"token": "sk-", "logprob": -0.1}, {"token": "proj-abcdefghijkmnopqrstu"}]',
            'data: {"type": "thinking_delta", "thinking": "key=demo-7f3a9c21"}\n\n',
            'data: {"password": "Qz7hunter2"}\n\ndata: [DONE]\n\n',
            '{"type": "thinking", "thinking": "?api_key=Qz7abcdef", "signature": "c2ln"}',
            "Authorization: Bearer Qz7abcdefghijk",
            "thinking",
            "",
        ]
    ),
    st.text(alphabet='abc xyz=:?&./-_{}[]"', max_size=24),
)

_LEAVES = st.one_of(
    _TEXTS,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.binary(max_size=8),
    st.sampled_from(
        [dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), uuid.UUID(int=7), dt.date(2026, 1, 2)]
    ),
)


def _signed(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {"type": st.sampled_from(["thinking", "reasoning", "text"]), "signature": _TEXTS},
        optional={"thinking": _TEXTS, "encrypted_content": _TEXTS, "api_key": children},
    )


_TREES = st.recursive(
    _LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(_KEYS, children, max_size=4),
        st.lists(st.tuples(_KEYS, _TEXTS).map(list), max_size=3).map(lambda h: {"headers": h}),
        st.lists(_TEXTS, max_size=4).map(lambda c: {"chunks": c}),
        _signed(children),
    ),
    max_leaves=14,
)

_REDACT = st.lists(
    st.sampled_from(["$..user", "$.messages[0]", "$..note", "$.q", "$..data", "$.args[1]"]),
    max_size=2,
    unique=True,
).map(tuple)
_KEEP = st.lists(
    st.sampled_from(["$..logprobs", "model:$..content", "tool:$.q", "$..chunks"]),
    max_size=2,
    unique=True,
).map(tuple)


def _fixed_point(frames: list[Frame], redact: tuple[str, ...], keep: tuple[str, ...]) -> None:
    """Each frame's request or arguments scrub to themselves: the bytes a second walk writes."""
    scrub = make_scrubber(redact, keep)
    seen = 0
    for frame in frames:
        if frame.kind not in (Kind.MODEL_REQUEST.value, Kind.TOOL_START.value):
            continue
        step = "model" if frame.kind == Kind.MODEL_REQUEST.value else "tool"
        args = canonical(frame.data()["args"])  # prefix references as the writer packed them
        again = scrub.for_step(step).payload(frame.kind, {"args": args})["args"]
        assert pack_tree(again) == pack_tree(args), (frame.seq, frame.kind)
        seen += 1
    assert seen == 4


@settings(max_examples=examples(default=80, ci=80, thorough=1500), deadline=None)
@given(
    first=_TREES,
    second=_TREES,
    extra=_TREES,
    response=_TREES,
    args=_TREES,
    result=_TREES,
    redact=_REDACT,
    keep=_KEEP,
)
def test_the_scrubbed_request_and_arguments_are_written_as_a_second_walk_would(
    first: Any,
    second: Any,
    extra: Any,
    response: Any,
    args: Any,
    result: Any,
    redact: tuple[str, ...],
    keep: tuple[str, ...],
) -> None:
    """Random model requests (the second extends the first's lists) and tool arguments."""
    journal = MemoryJournal()

    @redrive.model(name="model:m")  # type: ignore[untyped-decorator]
    def model(messages: list[Any], q: Any) -> Any:
        return response

    @redrive.tool(name="t", restart_safe=False)
    def tool(q: Any, data: Any) -> Any:
        return result

    with redrive.run(journal, "once", redact=redact, keep=keep):
        model([first, second, {"api_key": extra}], extra)
        model([first, second, {"api_key": extra}, response, args], extra)  # prefix references
        tool(args, first)
        tool(result, [args, {"password": args}])
    _fixed_point(list(journal.frames("once")), redact, keep)


@given(
    st.dictionaries(
        _KEYS | st.text(max_size=4),
        st.integers() | st.floats() | st.booleans() | st.none() | st.binary(max_size=8),
        max_size=4,
    ),
    st.lists(st.sampled_from(["$.step", "$.turn", "$.*", "$.api_key", "$..token"]), max_size=2),
)
def test_a_payload_scalar_is_kept_without_a_walk(fields: dict[str, Any], redact: list[str]) -> None:
    """A payload's number, bool, None or bytes field is what a walk would give: the field itself.

    The payload's scalars (a tool_start's turn and flags, a tool_done's step) are not
    handed to :meth:`Scrubber.value`; under any ``redact=`` the result is the walk's.
    """
    from redrive._scrub import Scrubber

    scrubber = make_scrubber(redact)
    walked = {key: scrubber.value(item, f"$.{key}") for key, item in fields.items()}
    calls: list[Any] = []
    real = Scrubber.value

    def counted(self: Scrubber, value: Any, path: str = "$") -> Any:
        calls.append(value)
        return real(self, value, path)

    Scrubber.value = counted  # type: ignore[method-assign]
    try:
        out = scrubber.payload(Kind.TOOL_DONE.value, dict(fields))
    finally:
        Scrubber.value = real  # type: ignore[method-assign]
    assert calls == []
    assert all(out[k] is fields[k] and walked[k] is fields[k] for k in fields)
