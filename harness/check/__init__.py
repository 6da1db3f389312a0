"""Judging one case: run it with every check, compare it with its oracle, prove its barriers
needed, keep what failed, and the worker processes that run cases apart.

    case.py         run_case, CaseResult, Status, failure_signature: one case, every check
    compare.py      assert_close / assert_outputs_close: the one comparison with an oracle
    barriers.py     barrier necessity: each barrier removed in turn must let a race appear
    regressions.py  saved failures (suites/regressions/*.json) and their replay
    workers.py      worker processes: start method, fork server, a case in a child of its own

Fuzzing (harness/fuzz/), the benchmark (harness/bench/) and the suites all judge cases here;
nothing here imports them.
"""
