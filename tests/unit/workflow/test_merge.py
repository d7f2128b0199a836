"""The three-way JSON merge that re-merges parallel branches."""

from __future__ import annotations

from millrace_django.contract import JSON
from millrace_django.engine.workflow import merge
from millrace_django.engine.workflow.merge import copied, same


def test_untouched_data_takes_the_stored_version() -> None:
    base: JSON = {"a": 1}
    assert merge(base, {"a": 1}, {"a": 2, "b": 3}) == {"a": 2, "b": 3}


def test_only_the_properties_the_activity_changed_are_written() -> None:
    base: JSON = {"a": 1, "b": 1, "c": 1}
    ours: JSON = {"a": 1, "b": 2, "c": 1, "new": "ours"}
    theirs: JSON = {"a": 5, "b": 1, "c": 1, "other": "theirs"}
    assert merge(base, ours, theirs) == {"a": 5, "b": 2, "c": 1, "other": "theirs", "new": "ours"}


def test_removals_are_applied() -> None:
    base: JSON = {"gone": 1, "kept": 1}
    assert merge(base, {"kept": 1}, {"gone": 1, "kept": 2, "x": 1}) == {"kept": 2, "x": 1}
    # They removed it, we did not touch it: stays removed.
    assert merge(base, base, {"kept": 1}) == {"kept": 1}


def test_objects_merge_per_property_recursively() -> None:
    base: JSON = {"n": {"a": 0, "b": 0}}
    ours: JSON = {"n": {"a": 1, "b": 0}}
    theirs: JSON = {"n": {"a": 0, "b": 2, "c": 3}}
    assert merge(base, ours, theirs) == {"n": {"a": 1, "b": 2, "c": 3}}


def test_objects_both_sides_created_merge_too() -> None:
    assert merge({}, {"n": {"a": 1}}, {"n": {"b": 2}}) == {"n": {"a": 1, "b": 2}}


def test_arrays_and_scalars_are_replaced_wholesale_last_writer_wins() -> None:
    base: JSON = {"list": [1], "x": "base"}
    ours: JSON = {"list": [1, 2], "x": "ours"}
    theirs: JSON = {"list": [1, 3], "x": "theirs"}
    assert merge(base, ours, theirs) == {"list": [1, 2], "x": "ours"}


def test_a_property_both_changed_and_one_removed_follows_ours() -> None:
    assert merge({"k": 1}, {}, {"k": 2}) == {}
    assert merge({"k": 1}, {"k": 3}, {}) == {"k": 3}


def test_json_sameness_tells_numbers_and_booleans_apart() -> None:
    assert not same(1, True)
    assert not same(1, 1.0)
    assert same({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]})
    assert merge({"f": 1}, {"f": True}, {"f": 1}) == {"f": True}


def test_the_result_shares_nothing_with_the_inputs() -> None:
    ours: JSON = {"n": {"deep": [1]}}
    merged = merge({}, ours, {"other": 1})
    assert isinstance(merged, dict) and isinstance(ours, dict)
    merged["n"]["deep"].append(2)  # type: ignore[index,union-attr]
    assert ours == {"n": {"deep": [1]}}


def test_a_copy_shares_no_object_or_array_with_its_original() -> None:
    original: JSON = {"a": [1, {"b": "x"}], "c": {"d": None, "e": [True, 2.5]}}
    copy = copied(original)
    assert copy == original
    assert isinstance(copy, dict) and isinstance(original, dict)
    copy["a"][1]["b"] = "changed"  # type: ignore[index]
    copy["c"]["e"].append(3)  # type: ignore[index,union-attr]
    assert original == {"a": [1, {"b": "x"}], "c": {"d": None, "e": [True, 2.5]}}
