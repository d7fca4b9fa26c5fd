"""The meters a log point reads: policy lag and actor staleness, per window and over the run."""

import numpy as np
import pytest

from dqnlab.engine.meters import LagMeter
from dqnlab.metrics import (
    ACTOR_STALENESS_MEAN,
    ACTOR_STALENESS_RUN_MEAN,
    POLICY_LAG_MAX,
    POLICY_LAG_MEAN,
    POLICY_LAG_RUN_MAX,
    POLICY_LAG_RUN_MEAN,
)


def test_lag_and_staleness_are_the_hand_computed_means_and_maxima_per_replica_per_window_and_run():
    meter = LagMeter(replicas=2)
    assert meter.pop() == [{}, {}]  # nothing sampled yet: nothing to report
    # update 10: replica 0 drew rows acted by versions 4 and 8, inserted at updates 6 and 9
    meter.add(10, np.array([[4, 8], [10, 10]]), np.array([[6, 9], [10, 10]]))
    meter.add(12, np.array([[12, 2], [11, 11]]), np.array([[12, 5], [11, 12]]))
    first = meter.pop()
    # replica 0: lags 6, 2, 0, 10 -> mean 4.5, max 10; staleness 2, 1, 0, 3 -> mean 1.5
    assert first[0][POLICY_LAG_MEAN] == 4.5 and first[0][POLICY_LAG_MAX] == 10 and first[0][ACTOR_STALENESS_MEAN] == 1.5
    # replica 1: lags 0, 0, 1, 1 -> 0.5, max 1; staleness 0, 0, 0, 1 -> 0.25
    assert first[1][POLICY_LAG_MEAN] == 0.5 and first[1][POLICY_LAG_MAX] == 1 and first[1][ACTOR_STALENESS_MEAN] == 0.25
    assert first[0][POLICY_LAG_RUN_MEAN] == 4.5 and first[0][POLICY_LAG_RUN_MAX] == 10
    meter.add(20, np.array([[19, 19], [0, 20]]), np.array([[19, 20], [20, 20]]))
    second = meter.pop()
    assert second[0][POLICY_LAG_MEAN] == 1 and second[0][POLICY_LAG_MAX] == 1  # the window starts afresh ...
    assert second[0][POLICY_LAG_RUN_MEAN] == pytest.approx(20 / 6) and second[0][POLICY_LAG_RUN_MAX] == 10  # run: on
    assert second[1][POLICY_LAG_RUN_MAX] == 20 and second[1][ACTOR_STALENESS_RUN_MEAN] == pytest.approx(21 / 6)
