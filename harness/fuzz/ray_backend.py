"""`harness fuzz --ray`: the fuzzing workers as Ray actors, one per CPU of a Ray cluster.

The campaign is the one of scheduler.py (tasks, slots, failure files, the summary): this
module only gives it workers of another kind. `RayWorkers` stands where `LocalWorkers` does:

    workers = RayWorkers("")        "" a local Ray instance; "auto", "HOST:PORT",
    slots = workers.start(options)  "ray://HOST:PORT" join a running cluster
    process, conn = workers.spawn(config, name)   one `FuzzActor` (1 CPU) somewhere
    workers.kill(process)           the actor and its emulator processes
    workers.close()                 the driver leaves the cluster

Where things run: the driver (this process) schedules tasks and writes every file -- the
regression cases (`--out`) and the example database (`--db`) -- and never builds a kernel.
Each `FuzzActor` runs on a node of the cluster, takes the node's toolchain step once
(`ensure_toolchain` under a file lock, so the first actor of a node installs and the others
wait), and runs the tasks of worker.py there: every case, check, barrier-necessity check and
shrink of a task runs on the node that drew it, with the node's own emulator build cache.

How messages travel: the scheduler holds a `_DriverEnd` per worker, a pipe end it can `wait`
on like a local worker's. What the scheduler sends (Task, Halt, Stop) goes to the actor as a
numbered `deliver` call (the actor puts them back in order: a threaded actor may run calls
out of order); a Task carries a copy of its family's example database. A collector thread
long-polls the actor's `drain` and writes what comes back into the pipe. `drain` acknowledges
what the collector already has, and the actor's `CaseStarted` and `FailingExample` wait for
that acknowledgement before the case (or the shrinking) goes on: a node that dies loses
nothing the driver was told, and its case in flight is one the driver knows, recorded as a
crash by the scheduler like a local worker's death. The example database's changes come back
the same way (`DatabaseChange`) and the collector applies them to `--db` on the driver, so a
campaign resumes from the seed and the driver's files alone.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import queue
import shutil
import tempfile
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

import ray
from hypothesis.database import ExampleDatabase

from harness.check import regressions
from harness.fuzz.messages import (CaseStarted, FailingExample, Ready, Stop, Task, TaskDone,
                                   WorkerConfig)
from harness.fuzz.worker import _run_task, example_database

POLL_SECONDS = 1.0          # a collector's long poll of its actor
ACK_SECONDS = 60.0          # how long a worker waits for the driver to have a message
KILL_SECONDS = 5.0          # how long an actor is given to end its own process group
PLACEMENTS = 3              # tries to place an actor whose node died before it was ready
OBJECT_STORE_BYTES = 100 * 2 ** 20   # a local instance's object store: messages are small
SOURCE_DIRS = ("core", "harness", "oracles")   # what must be the same on every node

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class DatabaseChange:
    """An example-database write on a node, replayed by the driver on `--db` (actor ->
    collector; the scheduler never sees it)."""
    family: str
    op: str                    # "save", "delete" or "move"
    key: bytes
    value: bytes
    dest: bytes = b""          # "move" only


def source_digest(root: Path = REPO) -> str:
    """A digest of the sources that decide what a case does, compared between the driver
    and every node: a node running another revision would find failures that do not
    reproduce."""
    h = hashlib.sha256()
    for top in SOURCE_DIRS:
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".cpp", ".h", ".S"):
                h.update(str(path.relative_to(root)).encode())
                h.update(path.read_bytes())
    return h.hexdigest()[:16]


class RayWorkers:
    """Fuzzing workers as Ray actors (the Ray counterpart of scheduler.LocalWorkers)."""

    def __init__(self, address: str, runtime_env: dict | None = None):
        self.address = address
        self.runtime_env = runtime_env
        self.connected = False
        self.options = None
        self.digest = ""

    def start(self, options) -> int:
        """Connect (or start a local instance; a process already connected to Ray keeps its
        connection, and `close` leaves it open); return the number of worker slots: one per
        CPU the cluster offers, unless `options.workers` says how many. ConnectionError
        when there is no cluster to use (the scheduler reports it as a usage error)."""
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level="WARNING",
                      runtime_env=self.runtime_env or _runtime_env())
        if self.address:
            kwargs["address"] = self.address
        else:
            kwargs.update(address="local", object_store_memory=OBJECT_STORE_BYTES)
        if not ray.is_initialized():   # else: the caller's connection (tests, notebooks)
            try:
                ray.init(**kwargs)
            except (ConnectionError, ValueError, RuntimeError) as err:
                where = self.address or "a local instance"
                raise ConnectionError(f"cannot start Ray ({where}): {err}") from None
            self.connected = True
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if cpus < 1:
            raise ConnectionError(f"the Ray cluster at {self.address or 'local'} offers no "
                                  "CPU to run fuzzing workers on")
        self.options = options
        self.digest = source_digest()
        return options.workers or cpus

    def spawn(self, config: WorkerConfig, name: str):
        worker = RayWorker(config, name, self.digest, Path(self.options.db))
        worker.start()
        return worker, worker.driver_end

    def kill(self, process) -> None:
        process.kill()

    def close(self) -> None:
        if self.connected:
            ray.shutdown()
            self.connected = False


def _runtime_env() -> dict:
    """Every worker imports this checkout first (families the driver imports with
    `--import`, e.g. the test families under suites/, must import there too). On a real
    cluster each node has metaltile installed; the source digest checks it is this one."""
    paths = [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}}


# ---- the driver's side of one worker --------------------------------------------------------

class _DriverEnd:
    """What the scheduler holds as a worker's pipe: it reads (and `wait`s on) a local pipe
    that the collector fills, and its sends go to the actor."""

    def __init__(self, worker: RayWorker, reader):
        self.worker, self.reader = worker, reader

    def fileno(self) -> int:
        return self.reader.fileno()

    def poll(self, timeout: float = 0.0) -> bool:
        return self.reader.poll(timeout)

    def recv(self):
        return self.reader.recv()

    def send(self, message) -> None:
        self.worker.deliver(message)

    def close(self) -> None:
        self.reader.close()


class RayWorker:
    """A fuzzing worker that is a Ray actor, as the scheduler sees a worker process:
    start, is_alive, join, exitcode, kill; `death` says how it ended, `node` where it ran,
    `lost` that its actor died (its node, most often: the scheduler replaces it without
    calling that a harness error when no case was running)."""

    pid = None

    def __init__(self, config: WorkerConfig, name: str, digest: str, db: Path):
        self.config, self.name, self.digest, self.db = config, name, digest, db
        reader, self.writer = multiprocessing.Pipe(duplex=False)
        self.driver_end = _DriverEnd(self, reader)
        self.actor = None
        self.sent = 0                       # numbered deliveries
        self.exitcode = None
        self.death = ""
        self.node = ""
        self.killed = False
        self.lost = False                   # died with its actor (a node lost), not a setup error
        self.collector = threading.Thread(target=self._collect, daemon=True,
                                          name=f"{name}-collector")

    def start(self) -> None:
        self._place()
        self.collector.start()

    def _place(self) -> None:
        self.sent = 0
        self.actor = FuzzActor.options(num_cpus=1, max_restarts=0, max_task_retries=0,
                                       max_concurrency=4, scheduling_strategy="SPREAD",
                                       name=None).remote(self.config, self.digest)

    def is_alive(self) -> bool:
        return self.collector.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self.collector.join(timeout)

    def deliver(self, message) -> None:
        """A scheduler message to the actor, numbered so that the actor keeps their order;
        a Task takes its family's example database along."""
        snapshot = _snapshot(self.db, message.family, self.config.disable) \
            if isinstance(message, Task) else None
        self.sent += 1
        try:
            self.actor.deliver.remote(self.sent, message, snapshot)
        except Exception:  # noqa: BLE001 - the actor is gone; the collector reports how
            pass

    def kill(self) -> None:
        """End the emulator processes the actor started, then the actor (a hung case
        leaves the actor's other threads free to answer `end`)."""
        self.killed = True
        if self.actor is not None:
            if self.node:   # it is running (one not placed yet would never answer)
                try:
                    ray.get(self.actor.end.remote(), timeout=KILL_SECONDS)
                except Exception:  # noqa: BLE001 - dead already, or cannot answer
                    pass
            try:
                ray.kill(self.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.collector.join(KILL_SECONDS + POLL_SECONDS)
        if self.exitcode is None:
            self.exitcode = -9

    def _collect(self) -> None:
        acked, placements = 0, 1
        try:
            while not self.killed:
                try:
                    events, ended, error = ray.get(self.actor.drain.remote(acked,
                                                                           POLL_SECONDS))
                except ray.exceptions.RayActorError:
                    # Its node died before it was ready (nothing was sent to it yet): place
                    # it again, on a node that is left.
                    if self.node or self.killed or placements >= PLACEMENTS:
                        raise
                    placements += 1
                    self._place()
                    continue
                for number, message in events:
                    if isinstance(message, DatabaseChange):
                        _apply(self.db, self.config.disable, message)
                    else:
                        if isinstance(message, Ready):
                            self.node = message.node
                        self.writer.send(message)
                    acked = number
                if ended:
                    self.exitcode = 1 if error else 0
                    self.death = error
                    break
        except (OSError, EOFError):
            pass   # the scheduler has closed its end: it is killing this worker
        except Exception as err:  # noqa: BLE001 - the actor or its node died
            self.exitcode = -9
            if not self.killed:
                self.death, self.lost = _death(err, self.node), True
        finally:
            self.writer.close()
            if self.exitcode is None:
                self.exitcode = -9


def _death(err: Exception, node: str) -> str:
    text = str(err).strip().splitlines()
    first = next((line for line in text if line.strip()), type(err).__name__)
    where = f" on node {node}" if node else ""
    return f"its Ray actor died{where}: {type(err).__name__}: {first[:200]}"


def _database_dir(db: Path, family: str, disable: tuple) -> Path:
    return Path(example_database(str(db), family, tuple(disable)).path)


def _snapshot(db: Path, family: str, disable: tuple) -> dict:
    """The files of one family's example database (a few small files: failing examples)."""
    root = _database_dir(db, family, disable)
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _apply(db: Path, disable: tuple, change: DatabaseChange) -> None:
    database = example_database(str(db), change.family, tuple(disable))
    if change.op == "save":
        database.save(change.key, change.value)
    elif change.op == "delete":
        database.delete(change.key, change.value)
    elif change.op == "move":
        database.move(change.key, change.dest, change.value)


# ---- the node's side -------------------------------------------------------------------------

class _ForwardingDatabase(ExampleDatabase):
    """A task's example database on a node: a local copy of the driver's, whose every
    change is also sent to the driver."""

    def __init__(self, local: ExampleDatabase, family: str, send):
        super().__init__()
        self.local, self.family, self.send = local, family, send

    def fetch(self, key: bytes):
        return self.local.fetch(key)

    def save(self, key: bytes, value: bytes) -> None:
        self.local.save(key, value)
        self.send(DatabaseChange(self.family, "save", key, value))

    def delete(self, key: bytes, value: bytes) -> None:
        self.local.delete(key, value)
        self.send(DatabaseChange(self.family, "delete", key, value))

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.local.move(src, dest, value)
        self.send(DatabaseChange(self.family, "move", src, value, dest))


class _ActorEnd:
    """What worker.py's task loop holds as its pipe, inside the actor."""

    def __init__(self, actor: FuzzActorBody):
        self.actor = actor

    def send(self, message) -> None:
        self.actor.post(message, wait=isinstance(message, (CaseStarted, FailingExample)))

    def poll(self, timeout: float = 0.0) -> bool:
        return not self.actor.inbox.empty()

    def recv(self):
        return self.actor.inbox.get()[0]   # (message, snapshot): a Halt has none


def _last_line(err: BaseException) -> str:
    return "".join(traceback.format_exception_only(err)).strip().splitlines()[-1]


def _node_label() -> str:
    node = ray.get_runtime_context().get_node_id()
    return f"{ray.util.get_node_ip_address()}/{node[:6]}"


def _setup_node() -> None:
    """The toolchain step, once per node: the first actor installs what is missing, the
    others wait for it and then find it."""
    import fcntl

    from core.runtime.emu import build, toolchain

    lock_path = build.cache_dir() / "toolchain.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        toolchain.ensure_toolchain()


class FuzzActorBody:
    """One fuzzing worker on a node (made a Ray actor as `FuzzActor`). A thread runs the
    worker's loop -- Ready, then tasks until Stop -- while Ray calls `deliver` and `drain`
    beside it."""

    def __init__(self, config: WorkerConfig, digest: str):
        if hasattr(os, "setpgrp"):
            os.setpgrp()   # `end` kills this group: the emulator processes it started
        self.config, self.digest = config, digest
        self.inbox = queue.Queue()
        self.early = {}                     # deliveries that overtook an earlier one
        self.delivered = 0
        self.lock = threading.Condition()
        self.outbox = []                    # (number, message), until acknowledged
        self.posted = 0
        self.acked = 0
        self.ended = False
        self.error = ""                     # why the worker loop ended early, if it did
        threading.Thread(target=self._main, daemon=True, name="fuzz-worker").start()

    # -- called by the driver --

    def deliver(self, number: int, message, snapshot: dict | None) -> None:
        with self.lock:
            self.early[number] = (message, snapshot)
            while self.delivered + 1 in self.early:
                self.delivered += 1
                self.inbox.put(self.early.pop(self.delivered))

    def drain(self, acked: int, wait: float):
        """The messages after `acked` (waiting up to `wait` s for one), whether the worker
        loop has ended, and its setup error if it failed."""
        with self.lock:
            if acked > self.acked:
                self.acked = acked
                self.outbox = [(n, m) for n, m in self.outbox if n > acked]
                self.lock.notify_all()
            self.lock.wait_for(lambda: self.posted > self.acked or self.ended, timeout=wait)
            return list(self.outbox), self.ended and not self.outbox, self.error

    def end(self) -> None:
        """Kill the emulator processes this actor started (its process group, less itself);
        the driver then ends the actor with ray.kill, which Ray takes as intended."""
        import signal

        me, group = os.getpid(), os.getpgid(0)
        if group != me:
            return
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                # the fields after the command's ")": state, ppid, pgrp
                pgrp = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2])
                if pgrp == group and int(entry.name) != me:
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ValueError, IndexError):
                continue   # gone meanwhile, or not Linux's /proc

    # -- the worker loop --

    def post(self, message, wait: bool = False) -> None:
        with self.lock:
            self.posted += 1
            number = self.posted
            self.outbox.append((number, message))
            self.lock.notify_all()
            if wait:   # the driver has it before the case (or the shrinking) goes on
                self.lock.wait_for(lambda: self.acked >= number, timeout=ACK_SECONDS)

    def _main(self) -> None:
        try:
            try:
                if self.digest != source_digest():
                    raise RuntimeError(
                        f"node {_node_label()} runs other metaltile sources (digest "
                        f"{source_digest()}, the driver's {self.digest}): install the "
                        "driver's revision on every node")
                regressions.import_families(self.config.imports)
                from harness.gen import family as families

                families.families()
                _setup_node()
            except BaseException as err:  # noqa: BLE001 - reported to the driver
                self.error = "its setup failed: " + _last_line(err)
                return
            conn = _ActorEnd(self)
            self.post(Ready(os.getpid(), _node_label()))
            while True:
                message, snapshot = self.inbox.get()
                if isinstance(message, Task):
                    self._run(conn, message, snapshot or {})
                    self.post(TaskDone(message.family))
                elif isinstance(message, Stop):
                    return
                # a Halt after its task ended: nothing to stop
        except BaseException as err:  # noqa: BLE001 - a harness bug: the driver reports it
            self.error = "its worker loop failed: " + "".join(traceback.format_exception(err))
        finally:
            with self.lock:
                self.ended = True
                self.lock.notify_all()

    def _run(self, conn, task: Task, snapshot: dict) -> None:
        from hypothesis.database import DirectoryBasedExampleDatabase

        copy = Path(tempfile.mkdtemp(prefix="metaltile-fuzz-db-"))
        try:
            for name, data in snapshot.items():
                (copy / name).parent.mkdir(parents=True, exist_ok=True)
                (copy / name).write_bytes(data)
            database = _ForwardingDatabase(DirectoryBasedExampleDatabase(copy), task.family,
                                           self.post)
            _run_task(conn, self.config, task, database=database)
        finally:
            shutil.rmtree(copy, ignore_errors=True)


FuzzActor = ray.remote(FuzzActorBody)
