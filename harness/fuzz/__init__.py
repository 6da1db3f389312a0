"""`harness fuzz`: time-budgeted, seeded, resumable fuzzing of the kernel families.

    scheduler.py  the parent process: options, tasks handed to worker slots, dead and hung
                  workers, failure files, the summary (`run(FuzzOptions(...), view)`)
    worker.py     a worker process: one Hypothesis run per task; this is where a case is
                  drawn (the `@given` test in `_run_task`)
    messages.py   what the two send each other: Task, CaseStarted, CaseEnded, FailingExample...
    view.py       what the run shows: the live table, plain progress lines, the summary
    ray_backend.py  the workers as Ray actors on the nodes of a cluster (`--ray`; needs the
                  `distributed` extra): the scheduler is the same, only its workers differ

Data flow: the scheduler sends a task (a time slice of one family) to a worker; the worker
draws each case from the family's strategy (harness/gen/) and judges it with
`harness.check.case.run_case`; it reports every case and each failing example back, and the
scheduler writes failures at once as regression cases (harness/check/regressions.py,
`<family>-<status>-<hash>.json` in `--out`, suites/regressions by default) while
Hypothesis's example database (`--db`) keeps them for the next run to replay first.

Nothing is re-exported here: import the module you need.
"""
