"""The worker command's garbage-collector settings (``settle_heap``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from millrace_django.management.commands.millrace_worker import (
    PYTHON_YOUNG_GENERATION,
    YOUNG_GENERATION,
    settle_heap,
)


@pytest.fixture(autouse=True)
def restored_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)
    gc.unfreeze()


def test_the_youngest_generation_is_collected_less_often() -> None:
    gc.set_threshold(PYTHON_YOUNG_GENERATION, 10, 10)
    settle_heap()
    assert gc.get_threshold() == (YOUNG_GENERATION, 10, 10)


@pytest.mark.parametrize("young", [5_000, 100_000])
def test_a_threshold_the_project_set_is_kept(young: int) -> None:
    gc.set_threshold(young, 20, 30)
    settle_heap()
    assert gc.get_threshold() == (young, 20, 30)


def test_automatic_collection_turned_off_stays_off() -> None:
    gc.set_threshold(0, 10, 10)
    settle_heap()
    assert gc.get_threshold()[0] == 0


def test_what_lives_at_start_is_frozen() -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    settle_heap()
    assert gc.get_freeze_count() > 0
