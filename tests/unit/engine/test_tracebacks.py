"""The traceback a job keeps leaves out the frames of the code that called the job."""

from __future__ import annotations

from millrace_django.engine.tracebacks import CALLER_MODULES, job_traceback

CALL_PATH = """
def call(function):
    try:
        function()
    except Exception as error:
        return error

def fail():
    raise RuntimeError("the call path itself failed")
"""


def caught_in(module: str) -> dict[str, object]:
    """Functions compiled as if they lived in ``module``: ``call(f)`` returns what
    ``f()`` raised, as the worker's execution path catches what a job raises."""
    namespace: dict[str, object] = {"__name__": module}
    exec(compile(CALL_PATH, f"<{module}>", "exec"), namespace)
    return namespace


def own_job() -> None:
    raise ValueError("the job failed")


def test_the_traceback_starts_at_the_first_frame_outside_the_call_path() -> None:
    runtime = caught_in("millrace_django.runtime.execution")
    text = job_traceback(runtime["call"](own_job))  # type: ignore[operator]
    assert text.startswith("Traceback (most recent call last):\n")
    assert text.splitlines()[1].endswith(", in own_job")
    assert "<millrace_django.runtime.execution>" not in text
    assert text.endswith("\nValueError: the job failed\n")  # as Python prints it


def test_where_the_call_path_itself_raised_its_innermost_frame_is_kept() -> None:
    for module in CALLER_MODULES:
        path = caught_in(module)
        text = job_traceback(path["call"](path["fail"]))  # type: ignore[operator]
        assert text.splitlines()[1:2] == [f'  File "<{module}>", line 9, in fail']
        assert text.endswith("\nRuntimeError: the call path itself failed\n")


def test_a_module_merely_named_like_the_call_path_is_the_jobs_own() -> None:
    lookalike = caught_in("asyncio_helpers")
    text = job_traceback(lookalike["call"](own_job))  # type: ignore[operator]
    assert text.splitlines()[1].endswith(", in call")
