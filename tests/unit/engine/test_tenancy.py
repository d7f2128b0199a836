"""The ambient tenant: nests, restores, and stays inside its own task."""

from __future__ import annotations

import asyncio
import threading

import pytest

from millrace_django.engine import current_tenant, tenant


def test_there_is_no_tenant_by_default() -> None:
    assert current_tenant() is None


def test_tenant_scopes_nest_and_restore() -> None:
    with tenant("acme"):
        assert current_tenant() == "acme"
        with tenant("globex"):
            assert current_tenant() == "globex"
            with tenant(None):
                assert current_tenant() is None
            assert current_tenant() == "globex"
        assert current_tenant() == "acme"
    assert current_tenant() is None


def test_a_scope_of_the_ambient_tenant_still_restores_what_it_encloses() -> None:
    with tenant("acme"), tenant("acme"):  # the inner one sets nothing: it is ambient
        with tenant("globex"):
            assert current_tenant() == "globex"
        assert current_tenant() == "acme"
    assert current_tenant() is None


def test_a_scope_of_the_ambient_tenant_undoes_a_tenant_its_block_left_behind() -> None:
    with tenant(None):
        tenant("acme").__enter__()  # entered, never exited
        assert current_tenant() == "acme"
    assert current_tenant() is None


def test_the_tenant_is_restored_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError), tenant("acme"):
        raise RuntimeError("boom")
    assert current_tenant() is None


def test_concurrent_tasks_keep_their_own_tenants() -> None:
    async def work(name: str, started: asyncio.Barrier) -> str | None:
        with tenant(name):
            await started.wait()  # both tasks are inside their scopes now
            return current_tenant()

    async def main() -> list[str | None]:
        started = asyncio.Barrier(2)
        return list(await asyncio.gather(work("acme", started), work("globex", started)))

    assert asyncio.run(main()) == ["acme", "globex"]


def test_another_thread_does_not_see_this_threads_tenant() -> None:
    seen: list[str | None] = []
    with tenant("acme"):
        thread = threading.Thread(target=lambda: seen.append(current_tenant()))
        thread.start()
        thread.join()
    assert seen == [None]


@pytest.mark.parametrize("bad", ["", "   ", 42])
def test_blank_or_non_string_tenants_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="non-blank"), tenant(bad):  # type: ignore[arg-type]
        pass
