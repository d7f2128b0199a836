"""The job and instance state machines as the contract declares them."""

from millrace_django.contract import (
    ACTIVE_JOB_STATES,
    ALLOWED_JOB_TRANSITIONS,
    INSERTABLE_JOB_STATES,
    PRE_ACTIVE_JOB_STATES,
    TERMINAL_INSTANCE_STATES,
    TERMINAL_JOB_STATES,
    InstanceState,
    JobState,
    can_transition,
)


def test_terminal_job_states_are_succeeded_dead_and_cancelled() -> None:
    assert {JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED} == TERMINAL_JOB_STATES


def test_a_failed_job_is_active_because_it_awaits_a_retry() -> None:
    assert JobState.FAILED in ACTIVE_JOB_STATES
    assert ACTIVE_JOB_STATES.isdisjoint(TERMINAL_JOB_STATES)
    assert set(JobState) == ACTIVE_JOB_STATES | TERMINAL_JOB_STATES


def test_terminal_states_never_change_again() -> None:
    for state in TERMINAL_JOB_STATES:
        assert not ALLOWED_JOB_TRANSITIONS[state]
        assert not any(can_transition(state, target) for target in JobState)


def test_only_a_claim_or_a_reclaim_leads_to_processing() -> None:
    sources = {s for s in JobState if can_transition(s, JobState.PROCESSING)}
    assert sources == {JobState.ENQUEUED, JobState.PROCESSING}


def test_scheduled_and_failed_jobs_reach_the_queue_only_through_activation() -> None:
    assert not can_transition(JobState.SCHEDULED, JobState.PROCESSING)
    assert not can_transition(JobState.FAILED, JobState.PROCESSING)
    assert can_transition(JobState.SCHEDULED, JobState.ENQUEUED)
    assert can_transition(JobState.FAILED, JobState.ENQUEUED)


def test_every_pre_active_state_can_be_cancelled_directly() -> None:
    for state in PRE_ACTIVE_JOB_STATES:
        assert can_transition(state, JobState.CANCELLED)


def test_new_jobs_are_stored_only_as_scheduled_enqueued_or_awaiting() -> None:
    assert {JobState.SCHEDULED, JobState.ENQUEUED, JobState.AWAITING} == INSERTABLE_JOB_STATES


def test_every_state_has_an_entry_in_the_transition_table() -> None:
    assert set(ALLOWED_JOB_TRANSITIONS) == set(JobState)


def test_state_values_are_the_stored_strings() -> None:
    assert JobState("failed") is JobState.FAILED
    assert str(InstanceState.COMPENSATED) == "compensated"


def test_running_and_suspended_instances_are_not_terminal() -> None:
    assert InstanceState.RUNNING not in TERMINAL_INSTANCE_STATES
    assert InstanceState.SUSPENDED not in TERMINAL_INSTANCE_STATES
    assert len(TERMINAL_INSTANCE_STATES) == 4
