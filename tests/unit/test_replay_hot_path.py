"""The shortcuts of the replay hot path give what the long way gives (issue 26).

Each shortcut is held to the path it replaces on arbitrary and hostile values:
the match view that shares what it keeps, the key-shape prefilter of the text
masking, the outcome payload the step reader decodes once (a peek leaves it
for that read), the usage read only from a response that spells it, and the
request expansion that copies nothing without a prefix reference.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from redrive._canonical import canonical, pack_tree
from redrive._masking import _SHAPE, _SIGN_CHARS, mask_text
from redrive.replay._policy import _walk, match_view
from tests import json_strategies as js

#: Model requests with model-minted ids in every place they may be, and any JSON.
_REQUESTS = st.one_of(js.request_bodies, js.response_bodies, js.json_values)


@given(_REQUESTS, st.sampled_from(["model", "tool", "value"]))
def test_match_view_without_patterns_equals_the_full_walk(body: Any, kind: str) -> None:
    """Same tree (same bytes) as the walk that rebuilds everything; the input is untouched."""
    try:
        tree = canonical(body, "request")
    except TypeError:
        return
    before = pack_tree(tree)
    view = match_view(tree, kind=kind)
    assert pack_tree(view) == pack_tree(_walk(tree, "$", (), drop=True, ids=kind == "model"))
    assert pack_tree(tree) == before


def test_match_view_shares_a_request_without_ids_and_drops_minted_ones() -> None:
    """Nothing to drop: the request itself; a tool call's id: dropped, the rest shared."""
    request = {"messages": [{"role": "user", "content": "hi"}], "model": "m"}
    assert match_view(request) is request
    call = {"type": "function", "id": "call_1", "function": {"name": "f"}}
    asked = {"messages": [call, {"role": "tool", "tool_call_id": "call_1", "content": "x"}]}
    view = match_view(asked)
    assert view == {
        "messages": [
            {"type": "function", "function": {"name": "f"}},
            {"role": "tool", "content": "x"},
        ]
    }
    assert view["messages"][0]["function"] is call["function"]
    assert asked["messages"][0]["id"] == "call_1"  # the input is not changed


_KEYISH = st.text(
    alphabet=st.sampled_from(list("skghpousr_-tlaAKIzJeyx0123456789ABCDEFGH. ")), max_size=80
)


@given(st.one_of(_KEYISH, st.text(max_size=60)))
def test_no_key_shape_matches_a_text_without_a_sign_character(text: str) -> None:
    """The prefilter is sound: a text the shape rules match holds one of its characters."""
    if _SHAPE.search(text) is not None:
        assert any(c in text for c in _SIGN_CHARS)


def test_every_key_shape_is_still_masked() -> None:
    """One key of each well-known shape, in a sentence, is masked (the prefilter lets it by)."""
    keys = [
        "sk-" + "a" * 24,
        "sk_live_" + "a" * 16,
        "ghp_" + "a" * 24,
        "github_pat_" + "a" * 24,
        "glpat-" + "a" * 24,
        "xoxb-" + "1" * 12,
        "AKIA" + "B" * 16,
        "AIza" + "c" * 35,
        "hf_" + "d" * 30,
        "eyJ" + "e" * 8 + ".eyJ" + "f" * 8 + ".sig",
    ]
    for key in keys:
        assert key not in mask_text(f"the key is {key} today"), key


def _outcome_frames() -> list[Any]:
    import redrive

    journal = redrive.open_journal(":memory:")

    @redrive.tool(read_only=True)
    def lookup(ref: str) -> dict[str, Any]:
        return {"ref": ref, "items": [1, 2, {"deep": [ref]}]}

    with redrive.run(journal, "hot"):
        lookup("a")
        lookup("b")
    return list(journal.frames("hot"))


def test_an_outcome_is_decoded_once_and_every_read_is_a_fresh_dict() -> None:
    """The reader's decode is handed out by the first read; later reads decode again."""
    from redrive.frames import decode
    from redrive.replay._steps import iter_steps

    for step in iter_steps(_outcome_frames(), "hot"):
        assert step.end is not None
        expected = decode(step.end.payload)
        first = step.decode_outcome()
        assert first == expected
        first["result"] = "changed by the caller"
        second = step.decode_outcome()
        assert second == expected and second is not first
        assert step.outcome == expected


def _signatures() -> st.SearchStrategy[Any]:
    import inspect

    kinds = st.sampled_from(
        [inspect.Parameter.POSITIONAL_OR_KEYWORD] * 4
        + [
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.KEYWORD_ONLY,
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ]
    )

    @st.composite
    def build(draw: st.DrawFn) -> inspect.Signature:
        names = draw(st.lists(st.sampled_from("abcdef"), unique=True, max_size=5))
        chosen = sorted((draw(kinds) for _ in names), key=lambda k: k.value)
        params: list[inspect.Parameter] = []
        seen: set[Any] = set()
        defaulted = False
        for name, kind in zip(names, chosen, strict=True):
            if kind in seen and kind.name.startswith("VAR"):
                continue
            seen.add(kind)
            plain = kind in (
                inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
            )
            default = inspect.Parameter.empty
            if kind.name.startswith("VAR"):
                pass
            elif (plain and defaulted) or draw(st.booleans()):
                default = 0
                defaulted = defaulted or plain
            params.append(inspect.Parameter(name, kind, default=default))
        return inspect.Signature(params)

    return build()


@given(
    _signatures(),
    st.lists(st.integers(0, 9), max_size=6),
    st.dictionaries(st.sampled_from("abcdefg"), st.integers(0, 9), max_size=4),
)
def test_the_fast_binder_binds_as_signature_bind(
    sig: Any, args: list[int], kwargs: dict[str, int]
) -> None:
    """Same dict in the same order, or the same TypeError (the kind: any signature, any call)."""
    from redrive.recorders._bind import binder

    def outcome(fn: Any) -> tuple[str, Any]:
        try:
            return "ok", list(fn().items())
        except TypeError as exc:
            return "error", str(exc)

    expected = outcome(lambda: dict(sig.bind(*args, **kwargs).arguments))
    assert outcome(lambda: binder(sig)(tuple(args), dict(kwargs))) == expected


def test_a_frame_is_checked_once_and_only_that_object_skips_the_check(
    monkeypatch: Any,
) -> None:
    """A frame that passed is not decoded again; an equal frame of hostile fields still fails."""
    import attrs

    from redrive.storage import _validate

    frame = _outcome_frames()[1]
    calls: list[bytes] = []
    real = _validate.decode

    def counting(data: bytes) -> Any:
        calls.append(data)
        return real(data)

    monkeypatch.setattr(_validate, "decode", counting)
    copy = attrs.evolve(frame)  # equal, another object: checked on its own
    assert _validate.frame_problem(copy) is None and len(calls) == 1
    assert _validate.frame_problem(copy) is None and len(calls) == 1
    hostile = attrs.evolve(frame, seq=True)  # == a frame of seq 1, and no count
    assert hostile == attrs.evolve(frame, seq=1)
    assert _validate.frame_problem(attrs.evolve(frame, seq=1)) is None
    assert _validate.frame_problem(hostile) is not None


def test_peeking_an_outcome_leaves_the_readers_decode_for_the_first_read() -> None:
    """A read-only look (what a replay's spend counts) costs no decode; the handle gets it."""
    import redrive.replay._steps as steps_module
    from redrive.frames import decode

    decodes: list[bytes] = []

    def counting(data: bytes) -> Any:
        decodes.append(data)
        return decode(data)

    for step in steps_module.iter_steps(_outcome_frames(), "hot"):
        assert step.end is not None
        original = steps_module.decode
        steps_module.decode = counting  # type: ignore[assignment]
        try:
            peeked = step.peek_outcome()
            first = step.decode_outcome()
        finally:
            steps_module.decode = original  # type: ignore[assignment]
        assert first is peeked and decodes == []
        assert step.peek_outcome() == first and step.peek_outcome() is not first


def test_a_stored_response_without_usage_in_its_bytes_is_not_decoded_for_it() -> None:
    """``with_usage`` reads a stored response only when its bytes spell ``usage``."""
    import redrive.replay._usage as usage_module
    from redrive._stored import store

    plain, _ = store({"role": "assistant", "content": "hi"}, "response")
    priced, _ = store({"model": "m", "usage": {"input_tokens": 3}}, "response")
    original = usage_module.decode
    seen: list[bytes] = []

    def counting(data: bytes) -> Any:
        seen.append(data)
        return original(data)

    usage_module.decode = counting  # type: ignore[assignment]
    try:
        assert usage_module.with_usage({"k": 1}, plain) == {"k": 1}
        assert usage_module.with_usage(None, priced) == {
            "usage": {"input_tokens": 3},
            "model": "m",
        }
    finally:
        usage_module.decode = original  # type: ignore[assignment]
    assert seen == [priced.data]


def _expanded(bodies: list[Any]) -> None:
    """Store each body as the writer does, expand it as the reader does: what was sent."""
    from redrive.frames import Kind, make_frame
    from redrive.replay._delta import Expander, expand

    writer, reader = Expander(), Expander()
    previous: dict[str, Any] | None = None
    for i, body in enumerate(bodies):
        try:
            sent = {"args": canonical(body, "request"), "turn": i, "issue": {"occ": 0}}
        except TypeError:
            return
        stored = writer.stored("model:m", sent)
        frame = make_frame(
            run_id="r",
            seq=i,
            kind=Kind.MODEL_REQUEST,
            name="model:m",
            payload=stored,
            prev_chain="",
        )
        full = reader.request(frame, stored)
        assert pack_tree(full) == pack_tree(sent)
        slow = {k: expand((previous or {}).get(k), v) for k, v in stored.items()}
        assert pack_tree(full) == pack_tree(slow)
        if stored is sent:  # stored whole: the maps are the reader's own, not copied
            assert full is stored and full["args"] is sent["args"]
        previous = full


@given(st.lists(js.request_bodies, min_size=1, max_size=4))
def test_expanding_requests_equals_the_full_walk(bodies: list[Any]) -> None:
    """Any requests, stored as the writer stores them, expand to what was sent."""
    _expanded(bodies)


def test_expanding_a_growing_conversation_resolves_references_and_shares_the_rest() -> None:
    """Lists that extend the last request's are references; the maps without any are shared."""
    turns = [
        [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]
        for i in range(4)
    ]
    bodies, messages = [], []
    for turn in turns:
        messages = messages + turn
        bodies.append({"model": "m", "messages": messages, "options": {"seed": 1}})
    _expanded(bodies)
    _expanded([{"model": "m", "options": {"seed": i}} for i in range(3)])
