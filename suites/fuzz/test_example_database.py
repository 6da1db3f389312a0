"""The fuzzing worker's use of Hypothesis's example database (harness/fuzz/worker.py): a
failing example one task found is the first case the next task of that family runs, and
each family (with its disabled passes) keeps examples of its own.

The tasks run in this process, on a stand-in for the connection to the parent, with the
test-only family `two_bugs` (no kernel to compile for a failing case). This is the test
that fails when Hypothesis stops replaying the examples the way the worker relies on.
"""

from harness.fuzz import worker
from harness.fuzz.messages import FailingExample, Task, WorkerConfig
from suites.fuzz.standin import Parent

FAR = 10 ** 10   # a deadline that never comes


def _task(seed, known=(), reuse=True):
    return Task(family="two_bugs", seed=seed, reuse=reuse, slice_end=FAR, deadline=FAR,
                known=tuple(known), avoid=())


def test_a_failing_example_is_replayed_first_by_the_next_task(tmp_path, test_families):
    config = WorkerConfig(db=str(tmp_path / "db"), imports=(test_families.__name__,),
                          disable=(), barrier_every=0, timeout=60.0)
    first = Parent()
    worker._run_task(first, config, _task(seed=1))
    minimal = {m.record["signature"]: m.record["params"] for m in first.sent
               if isinstance(m, FailingExample) and m.final}
    assert sorted(minimal.values(), key=lambda p: p["n"]) == [{"n": 10}, {"n": 50}], minimal
    assert [p.name for p in (tmp_path / "db").iterdir()] == ["two_bugs"]

    # Another seed, both bugs known (counted, not shrunk): the replay comes first.
    again = Parent(halt_after=2)
    worker._run_task(again, config, _task(seed=2, known=minimal))
    assert sorted(again.started(), key=lambda p: p["n"]) == [{"n": 10}, {"n": 50}], \
        again.started()


def test_each_family_and_set_of_disabled_passes_has_its_own_examples(tmp_path):
    databases = {worker.example_database(str(tmp_path), family, disable).path
                 for family, disable in [("copy", ()), ("gemm", ()), ("copy", ("thread_sync",)),
                                         ("copy", ("thread_sync", "legalize"))]}
    assert len(databases) == 4 and all(p.parent == tmp_path for p in databases)
    assert worker.example_database(str(tmp_path), "copy", ("b", "a")).path == \
        worker.example_database(str(tmp_path), "copy", ("a", "b")).path
