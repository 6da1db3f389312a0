"""`harness fuzz --ray` (harness/fuzz/ray_backend.py) on a real Ray: workers are Ray actors.

In the default run: a local Ray instance with 2 CPUs fuzzes a pipeline with thread_sync
switched off and the two-bug family, and the failures must be caught, shrunk where they ran,
and saved by the driver, with the example database written on the driver too; a node whose
sources differ from the driver's runs nothing; the example database's round trip between a
node and the driver; and the usage error where Ray is missing. In the slow run: a two-node `ray.cluster_utils.Cluster` loses the node that found a
failure while it runs a case; the failure is on disk, the case in flight is a crash, and the
campaign completes on the node left. Where Ray is not installed these tests skip (the reason
says how to install it); the rest of suites/fuzz runs without it.
"""

import importlib.util
import os
import sys
import threading
import time

import pytest

from harness.check import regressions
from harness.check.case import WORKER_CRASH
from harness.fuzz import scheduler

HAVE_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="Ray is not installed (pip install "
                               "'metaltile[distributed]'): the --ray backend is not tested")
MINIMAL_STAGED = {"n": 8, "threads": 32, "dtype": "float32"}


def _options(tmp_path, **kwargs):
    kwargs.setdefault("seed", 1)
    kwargs.setdefault("workers", 0)   # one per CPU
    return scheduler.FuzzOptions(db=tmp_path / "db", out=tmp_path / "out", ray="", **kwargs)


def _describe(summary):
    lines = [f"{f.family} {f.signature}: {f.path}\n{f.message}" for f in summary.failures]
    return "\n".join(lines + summary.errors)


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance with 2 CPUs for this module (RayWorkers uses the connection it
    finds); prints how long it took to start."""
    import ray

    from harness.fuzz import ray_backend

    started = time.perf_counter()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=ray_backend.OBJECT_STORE_BYTES,
             runtime_env=ray_backend._runtime_env())
    print(f"Ray local instance started in {time.perf_counter() - started:.1f} s")
    yield ray
    ray.shutdown()


@needs_ray
@pytest.mark.xdist_group("ray")
def test_a_ray_campaign_catches_shrinks_and_saves_like_a_local_one(tmp_path, test_families,
                                                                   local_ray):
    started = time.perf_counter()
    summary = scheduler.run(_options(tmp_path, budget=120, max_cases=250,
                                     families=("staged_transpose", "two_bugs"),
                                     disable=("thread_sync",),
                                     imports=(test_families.__name__,)))
    print(f"{summary.cases} cases in {time.perf_counter() - started:.1f} s",
          {n: t.cases for n, t in summary.families.items()})
    assert summary.workers == 2 and not summary.errors, _describe(summary)
    assert summary.exit_code == 1 and not summary.interrupted
    found = {(f.family, f.signature.split("@")[0]): f for f in summary.failures}
    assert set(found) == {("staged_transpose", "mismatch+finding:race,uninit"),
                          ("two_bugs", "internal_error:ValueError"),
                          ("two_bugs", "internal_error:KeyError")}, _describe(summary)
    # Shrunk on the node, to the same minimal examples as local fuzzing finds.
    staged = found["staged_transpose", "mismatch+finding:race,uninit"]
    assert staged.shrunk and staged.params == MINIMAL_STAGED
    assert found["two_bugs", "internal_error:ValueError"].params == {"n": 50}
    assert found["two_bugs", "internal_error:KeyError"].params == {"n": 10}

    # The driver wrote every file: the regression cases and the example database.
    [node] = summary.nodes
    assert sorted(p.name for p in (tmp_path / "out").glob("*.json")) == \
        sorted(f.path.name for f in summary.failures)
    case = regressions.load(staged.path)
    assert (case.state, case.disable, case.params) == ("open", ["thread_sync"], MINIMAL_STAGED)
    assert case.found_by["node"] == node and case.found_by["shrunk"]
    assert regressions.replay(case).same_failure(case)
    saved = {p.parent.parent.name for p in (tmp_path / "db").rglob("*") if p.is_file()}
    assert saved == {"staged_transpose--disable-thread_sync", "two_bugs--disable-thread_sync"}

    # Per node, the same counts as per family.
    tally = summary.nodes[node]
    assert tally.cases == summary.cases and tally.failures == 3 and tally.lost == 0
    assert tally.failing_cases == sum(t.failing_cases for t in summary.families.values())

    # The driver's files resume the campaign: the next one replays the saved failure first
    # (on a node, from the copy of the database it was sent), a known bug now.
    again = scheduler.run(_options(tmp_path, budget=60, max_cases=2, workers=1, seed=2,
                                   families=("staged_transpose",), disable=("thread_sync",),
                                   imports=(test_families.__name__,)))
    assert again.exit_code == 0 and not again.failures and not again.errors, _describe(again)
    [replayed] = again.known
    assert replayed.case_number == 1 and replayed.params == MINIMAL_STAGED


@needs_ray
@pytest.mark.xdist_group("ray")
def test_a_node_with_other_sources_refuses_to_fuzz(tmp_path, local_ray, monkeypatch):
    from harness.fuzz import ray_backend

    # The driver's sources "differ" from the node's: the actor must not run a case.
    monkeypatch.setattr(ray_backend, "source_digest", lambda root=None: "0" * 16)
    summary = scheduler.run(_options(tmp_path, budget=60, workers=1, families=("copy",)))
    [error] = summary.errors
    assert "worker 0 failed to start" in error and "runs other metaltile sources" in error
    assert "0" * 16 in error and summary.cases == 0 and summary.exit_code == 1


@needs_ray
def test_the_example_database_of_a_node_is_written_on_the_driver(tmp_path):
    from hypothesis.database import DirectoryBasedExampleDatabase

    from harness.fuzz import ray_backend

    driver_db = tmp_path / "db"
    ray_backend._apply(driver_db, ("thread_sync",), ray_backend.DatabaseChange(
        "copy", "save", b"key", b"old"))
    snapshot = ray_backend._snapshot(driver_db, "copy", ("thread_sync",))
    assert snapshot and all(isinstance(d, bytes) for d in snapshot.values())

    node_copy = tmp_path / "node"   # what a task on a node starts from
    for name, data in snapshot.items():
        (node_copy / name).parent.mkdir(parents=True, exist_ok=True)
        (node_copy / name).write_bytes(data)
    sent = []
    db = ray_backend._ForwardingDatabase(DirectoryBasedExampleDatabase(node_copy), "copy",
                                         sent.append)
    assert list(db.fetch(b"key")) == [b"old"]
    db.save(b"key", b"new")
    db.move(b"key", b"secondary", b"old")
    db.delete(b"other", b"gone")
    assert [(c.op, c.key, c.value, c.dest) for c in sent] == [
        ("save", b"key", b"new", b""), ("move", b"key", b"old", b"secondary"),
        ("delete", b"other", b"gone", b"")]
    for change in sent:
        ray_backend._apply(driver_db, ("thread_sync",), change)
    driver = DirectoryBasedExampleDatabase(driver_db / "copy--disable-thread_sync")
    assert list(driver.fetch(b"key")) == [b"new"]
    assert list(driver.fetch(b"secondary")) == [b"old"]


def test_ray_missing_is_a_usage_error_naming_the_extra(tmp_path, monkeypatch, capsys):
    from harness.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)   # import ray raises ImportError
    monkeypatch.delitem(sys.modules, "harness.fuzz.ray_backend", raising=False)
    code = main(["fuzz", "--ray", "--budget", "5s", "--db", str(tmp_path / "db"),
                 "--out", str(tmp_path / "out")])
    assert code == 2
    assert "pip install 'metaltile[distributed]'" in capsys.readouterr().err


@pytest.mark.parametrize("args,ray,workers", [
    (["--ray"], "", 0),                                   # a local instance, one per CPU
    (["--ray", "auto", "--workers", "3"], "auto", 3),
    (["--ray", "ray://head:10001"], "ray://head:10001", 0),
    ([], None, min(os.cpu_count() or 1, 4)),              # no Ray: local processes
])
def test_the_command_line_chooses_the_workers(args, ray, workers, tmp_path, monkeypatch):
    from harness.cli import main

    seen = []

    def run(options, view):
        seen.append(options)
        return scheduler.FuzzSummary(seed=1, budget=options.budget, workers=1)

    monkeypatch.setattr(scheduler, "run", run)
    assert main(["fuzz", "--budget", "5s", "--out", str(tmp_path), *args]) == 0
    [options] = seen
    assert (options.ray, options.workers) == (ray, workers)


class _KillWhenFound:
    """A view that removes `node` from `cluster` half a second after a failure found there
    has reached the driver: the node is running a case then (a case takes a second)."""

    def __init__(self, cluster, node, label_of):
        self.cluster, self.node, self.label_of = cluster, node, label_of
        self.killed_at = None
        self.cases_at_kill = {}

    def start(self, summary, options, deadline):
        pass

    def note(self, text, style=""):
        print(text)

    def refresh(self, summary, running):
        label = self.label_of(self.node)
        if self.killed_at is None and label in summary.nodes and \
                summary.nodes[label].failures:
            self.killed_at = time.time()
            threading.Thread(target=self._kill, args=(summary,)).start()

    def _kill(self, summary):
        time.sleep(0.5)   # the scheduler goes on meanwhile: the node is in a case
        self.cases_at_kill = {n: t.cases for n, t in summary.nodes.items()}
        self.cluster.remove_node(self.node, allow_graceful=False)

    def stop(self, summary):
        pass


@needs_ray
@pytest.mark.slow
def test_a_node_that_dies_mid_case_loses_nothing_and_the_campaign_completes(tmp_path,
                                                                            test_families,
                                                                            monkeypatch):
    import ray
    from ray.cluster_utils import Cluster

    from harness.fuzz import ray_backend
    from suites.fuzz.fuzzfamilies import MARKED_NODE

    monkeypatch.setenv("PYTHONPATH", str(ray_backend.REPO))
    monkeypatch.delenv(MARKED_NODE, raising=False)
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False,
        "object_store_memory": ray_backend.OBJECT_STORE_BYTES})
    monkeypatch.setenv(MARKED_NODE, "1")   # only the second node's workers fail
    doomed = cluster.add_node(num_cpus=1, object_store_memory=ray_backend.OBJECT_STORE_BYTES)
    monkeypatch.delenv(MARKED_NODE)

    def label_of(node):
        return f"{node.node_ip_address}/{node.node_id[:6]}"

    dead, alive = label_of(doomed), label_of(cluster.head_node)
    try:
        ray.init(address=cluster.address, log_to_driver=False,
                 runtime_env=ray_backend._runtime_env())
        cluster.wait_for_nodes()
        view = _KillWhenFound(cluster, doomed, label_of)
        summary = scheduler.run(_options(tmp_path, budget=75, families=("marked_node",),
                                         imports=(test_families.__name__,)), view)
    finally:
        ray.shutdown()
        cluster.shutdown()

    assert view.killed_at is not None, _describe(summary)
    assert summary.workers == 2 and not summary.interrupted and not summary.errors, \
        _describe(summary)
    by_signature = {f.signature.split("@")[0]: f for f in summary.failures}
    assert set(by_signature) == {"internal_error:ValueError", WORKER_CRASH}, _describe(summary)

    # What the dead node found is on disk, as found there.
    found = regressions.load(by_signature["internal_error:ValueError"].path)
    assert found.found_by["node"] == dead and found.state == "open"
    assert "on a marked node" in found.message
    assert list((tmp_path / "db" / "marked_node").rglob("*")), "example database not saved"
    # Its case in flight is a crash of that case.
    crash = regressions.load(by_signature[WORKER_CRASH].path)
    assert crash.status == "crash" and crash.found_by["node"] == dead
    assert "Ray actor died" in crash.message and crash.imports == [test_families.__name__]
    assert summary.nodes[dead].lost == 1 and summary.nodes[dead].workers == 0
    # The campaign went on with the node left, to the end of the budget.
    assert summary.nodes[alive].cases > view.cases_at_kill.get(alive, 0)
    assert summary.elapsed >= 75 - 5 and summary.exit_code == 1
