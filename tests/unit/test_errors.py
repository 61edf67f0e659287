"""The errors: typed fields, pickling with every field, and the reasons that tell cases apart."""

from __future__ import annotations

import json
import pickle
import typing
from typing import Any

import pytest

import redrive
from redrive import errors
from redrive.errors import DivergenceReason, RunBusyReason
from redrive.storage import MemoryJournal
from tests.handles import worker_handle

ERROR_CLASSES = [
    obj
    for name in errors.__all__
    if isinstance(obj := getattr(errors, name), type) and issubclass(obj, Exception)
]


def _keywords(cls: type[errors.ReplayError]) -> list[str]:
    """The keyword fields ``cls`` declares (``run_id``, ``seq`` and its own), as mypy reads them."""
    hints = typing.get_type_hints(cls)
    return [name for name in hints if not name.startswith("_") and name != "message"]


def _values(cls: type[errors.ReplayError]) -> dict[str, Any]:
    """A distinct value for every keyword field of ``cls`` (a valid one for ``reason``)."""
    values: dict[str, Any] = {}
    for i, name in enumerate(_keywords(cls)):
        if name == "reason":
            values[name] = (
                DivergenceReason.STEP if cls is errors.DivergenceError else RunBusyReason.CLAIMED
            )
        elif name == "timed_out":
            values[name] = True
        elif name == "diff":
            values[name] = [("$.a", 1, 2)]
        else:
            values[name] = f"{name}-{i}" if i % 2 else i
    return values


def test_every_public_error_is_exported_and_documented() -> None:
    """errors.__all__ is sorted, and redrive re-exports each error class."""
    assert list(errors.__all__) == sorted(errors.__all__)
    for cls in ERROR_CLASSES:
        assert cls.__doc__, cls.__name__
        assert getattr(redrive, cls.__name__, cls) is cls


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_every_error_pickles_with_every_field(cls: type[errors.ReplayError]) -> None:
    """Built with every keyword field, an error comes back from pickle with all of them."""
    values = _values(cls)
    err = cls("what happened; what to do", **values)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and str(back) == str(err) and back.args == err.args
    given = {name: value for name, value in values.items() if name != "reason"}
    for name, value in given.items():
        assert getattr(back, name) == value, name
    assert back.to_fields() == err.to_fields()
    assert back.fields == err.fields
    assert set(err.fields) == set(_keywords(cls)) - {"run_id", "seq"}


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_fields_default_to_none(cls: type[errors.ReplayError]) -> None:
    """An error built with its message only has every declared field, None (or False, a reason)."""
    err = cls("bare")
    assert err.run_id is None and err.seq is None
    for name in _keywords(cls)[2:]:
        assert name in err.fields and err.fields[name] == getattr(err, name), name
        if name == "next_steps":  # no advice given as data: none
            assert err.next_steps == (), name
        elif name not in ("reason", "timed_out"):
            assert getattr(err, name) is None, name


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_to_fields_rebuilds_the_error(cls: type[errors.ReplayError]) -> None:
    """``cls(message, **err.to_fields())`` builds the same error (re-raising with a new message)."""
    err = cls("first", **_values(cls))
    again = cls("second", **err.to_fields())
    assert again.to_fields() == err.to_fields()


def test_misspelt_field_is_refused() -> None:
    """An error of this module takes only its own fields: a misspelt one is a TypeError."""
    with pytest.raises(TypeError):
        errors.DivergenceError("x", difff=[])  # type: ignore[call-arg]


def test_subclass_defined_elsewhere_keeps_free_fields() -> None:
    """ReplayError, and a subclass of it outside errors.py, take any fields as keywords."""
    from redrive._check import CheckFailedError

    err = CheckFailedError("2 runs failed", run_id="r", seq=1, report="the report")
    back = pickle.loads(pickle.dumps(err))
    assert (back.run_id, back.seq, back.fields) == (
        "r",
        1,
        {"next_steps": (), "report": "the report"},
    )
    root = pickle.loads(pickle.dumps(redrive.ReplayError("x", run_id="r", detail=1)))
    assert (root.run_id, root.fields) == ("r", {"next_steps": (), "detail": 1})


def test_reasons_are_strings() -> None:
    """A reason compares equal to its text and goes into JSON as that text (CLI --json)."""
    err = errors.RunBusyError("busy", run_id="r", owner="w1")
    assert err.reason == "leased"
    assert json.loads(json.dumps(err.to_fields()))["reason"] == "leased"
    explicit = errors.DivergenceError("d", reason="turn_order")
    assert explicit.reason is DivergenceReason.TURN_ORDER
    with pytest.raises(ValueError):
        errors.DivergenceError("d", reason="no such reason")


# DivergenceError: each construction site's fields give its reason


def _divergence(**fields: Any) -> errors.DivergenceError:
    return errors.DivergenceError("diverged", run_id="r", **fields)


def test_reason_derived_for_each_case() -> None:
    """Without reason=, the fields each raiser passes today name the case."""
    found = {"expected": {"a": 1}, "found": {"a": 2}, "expected_key": "k1", "found_key": "k2"}
    assert (
        _divergence(seq=3, kind="tool", name="t", found_kind="tool", found_name="t", **found).reason
        is DivergenceReason.ARGUMENTS
    )
    assert (
        _divergence(seq=3, kind="tool", name="t", found_kind="tool", found_name="u", **found).reason
        is DivergenceReason.STEP
    )
    assert (
        _divergence(seq=3, kind="model", name="m", found_kind="tool", found_name="t").reason
        is DivergenceReason.STEP
    )
    assert (
        _divergence(seq=3, kind="tool", name="t", found_kind="model", found_name="m").reason
        is DivergenceReason.TURN_ORDER
    )
    # the loop finished (replay/_state.py): nothing asked for, the unused steps as context
    assert (
        _divergence(seq=3, kind="tool", name="t", found_kind=None, found_name=None, context=[])
    ).reason is DivergenceReason.UNUSED_STEPS
    # a replayed stream read past its partial record (recorders/http.py)
    assert (
        _divergence(seq=3, kind="model", name="openai:chat").reason
        is DivergenceReason.STREAM_OVERRUN
    )
    # an approval decided for another payload (replay/_approval.py)
    approval = {"kind": "value", "name": "approval", "found_kind": "value"}
    assert (
        _divergence(seq=None, found_name="approval", **approval).reason
        is DivergenceReason.APPROVAL_PAYLOAD
    )


def _tools() -> tuple[Any, Any]:
    @redrive.model
    def llm(prompt: str) -> str:
        return prompt

    @redrive.tool(read_only=True)
    def lookup(customer: str) -> str:
        return customer.upper()

    return llm, lookup


def test_reason_of_real_divergences() -> None:
    """Replays that diverge in each way raise the DivergenceError of that reason."""
    llm, lookup = _tools()
    journal = MemoryJournal()
    with redrive.run(journal, "r") as run:
        run.finish([llm("plan"), lookup("ada"), llm("answer")])

    def reason_of(*steps: Any) -> DivergenceReason:
        with (
            pytest.raises(redrive.DivergenceError) as info,
            redrive.run(journal, "r", live=False),
        ):
            for step in steps:
                step()
        return info.value.reason

    assert reason_of(lambda: llm("other plan")) is DivergenceReason.ARGUMENTS
    assert reason_of(lambda: lookup("ada")) is DivergenceReason.STEP
    assert reason_of(lambda: llm("plan"), lambda: llm("answer")) is DivergenceReason.TURN_ORDER
    assert reason_of(lambda: llm("plan")) is DivergenceReason.UNUSED_STEPS


def test_reason_of_a_changed_approval() -> None:
    """An approval decided for one payload and asked for another diverges as APPROVAL_PAYLOAD."""
    journal = MemoryJournal()
    with redrive.run(journal, "a"):
        redrive.await_approval("deploy", {"version": 1})
    journal.decide("a", "deploy", True, by="ops")
    with pytest.raises(redrive.DivergenceError) as info, redrive.run(journal, "a"):
        redrive.await_approval("deploy", {"version": 2})
    assert info.value.reason is DivergenceReason.APPROVAL_PAYLOAD
    assert info.value.diff == [("$.version", 1, 2)]


def test_run_busy_reason_derived() -> None:
    """RunBusyError's fields name its case; a LeaseLostError is always LEASE_LOST."""
    assert errors.RunBusyError("b", run_id="r", seq=1).reason is RunBusyReason.CLAIMED
    assert errors.RunBusyError("b", run_id="r", owner="w").reason is RunBusyReason.LEASED
    assert errors.RunBusyError("b", run_id="r", timed_out=True).reason is RunBusyReason.TIMED_OUT
    assert errors.RunBusyError("b", lock_timeout=5.0).reason is RunBusyReason.LOCKED
    lost = errors.LeaseLostError("lost", run_id="r", seq=2, epoch=1, current_epoch=2)
    assert lost.reason is RunBusyReason.LEASE_LOST and lost.owner is None
    assert (lost.epoch, lost.current_epoch, lost.fields["current_epoch"]) == (1, 2, 2)


def test_leased_run_refuses_a_second_worker() -> None:
    """A run leased by one worker refuses another with a RunBusyError of reason LEASED."""
    journal = MemoryJournal()
    with (
        redrive.run(journal, "l", lease=30.0),
        pytest.raises(redrive.RunBusyError) as info,
        redrive.run(worker_handle(journal), "l", lease=30.0),
    ):
        pass
    assert info.value.reason is RunBusyReason.LEASED and info.value.owner is not None


class Tagged(redrive.ReplayError):
    """A user's subclass that sets an attribute of its own."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message, run_id="r")
        self.detail = detail


def test_errors_pickle_with_notes_and_subclass_attributes() -> None:
    """Notes (``add_note``) and attributes a user subclass sets cross a pickle boundary."""
    import pickle

    err = redrive.DivergenceError("m", run_id="r", seq=2)
    err.add_note("seen in worker 3")
    back = pickle.loads(pickle.dumps(err))
    assert back.__notes__ == ["seen in worker 3"]
    assert (back.run_id, back.seq, back.reason) == ("r", 2, err.reason)
    tagged = pickle.loads(pickle.dumps(Tagged("m", "why")))
    assert (tagged.detail, tagged.run_id, str(tagged)) == ("why", "r", "m")
