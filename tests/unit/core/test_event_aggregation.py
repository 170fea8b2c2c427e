"""One pass's events as the shell posts them."""

from __future__ import annotations

from ascend_hybrid.actions import PostEvent, aggregate_events


def test_the_normal_events_of_a_pass_are_one_named_by_the_first_and_warnings_stay_apart():
    events = [PostEvent("Normal", "Created", "128 pods × 8 910B NPUs, world 1024"),
              PostEvent("Warning", "PredictedOutOfMemory", "stage 0 needs 70 GiB"),
              PostEvent("Normal", "Placed", "attempt 1: 128 pods on 128 nodes in 8 racks"),
              PostEvent("Normal", "GangReleased", "all 128 pods created; scheduling gates removed")]
    assert aggregate_events(events) == [
        PostEvent("Normal", "Created", "128 pods × 8 910B NPUs, world 1024; Placed: attempt 1: 128 pods on 128 "
                                       "nodes in 8 racks; GangReleased: all 128 pods created; scheduling gates removed"),
        PostEvent("Warning", "PredictedOutOfMemory", "stage 0 needs 70 GiB")]


def test_a_single_event_or_none_is_posted_as_it_is():
    running = [PostEvent("Normal", "Running", "attempt 1: 2 pods running")]
    assert aggregate_events(running) == running and aggregate_events([]) == []
    warnings = [PostEvent("Warning", "Unknown", "a"), PostEvent("Warning", "NodeNotReady", "b")]
    assert aggregate_events(warnings) == warnings
