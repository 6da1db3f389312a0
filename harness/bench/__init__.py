"""`harness bench`: the benchmark and the gate every compiler change passes.

Where a bench number comes from, in the order the data flows (docs/bench.md explains the
counters, the model and the gate):

    cases.py      the registry: `BenchCase` = a kernel family of harness/gen at fixed params
                  (an LLM shape, scaled for the emulator); `CASES`, `select`. A new bench
                  case goes there.
    measure.py    one case -> `CaseMeasurement`: compiled once, cold (`first_compile`, the
                  timed compile whose kernel is the one that runs), one checked run through
                  harness/check/case.py (`run_case`: oracle and every emulator check ->
                  status), the emulator's counters summed over launches (`aggregate`), the
                  modeled times (`modeled`, through roofline.py), warm compile rounds; all
                  cases -> `BenchRun` (`measure_all`)
    roofline.py   the cost model: counters -> modeled Apple-GPU seconds per chip and terms
    baseline.py   the only place a run becomes JSON and back: bench.json, the
                  pytest-benchmark file, and the committed baseline
                  (reports/baselines/emu.json), `update_baseline`, `load_baseline`
    gate.py       a run against its baseline -> `Change`s; `gate_failed` is the verdict
    report.py     the console tables, bench.md and bench.html of a run and its Changes
    workflow.py   one `harness bench` / `harness report` run: `prepare` options ->
                  `execute` (measure, A/B, baseline, gate, reports) -> `BenchOutcome`;
                  harness/cli.py parses options into `BenchOptions` and prints the outcome

Beside the gate, each with its own command:

    against.py      compile time A/B against another git revision (`harness bench --against`)
    emu_against.py  the emulator's own speed A/B against another revision (`harness
                    emu-against`)
    against_worker.py, emu_against_worker.py
                    their timing programs: files of this tree, run by path in each timed
                    tree's interpreter (the other revision need not have them)
    msl_digest.py   every bench case's MSL pinned by digest (reports/baselines/msl.json)
    reference_kernels/  hand-written MSL the generated kernels are set against
    peers/          MLX's own kernels run beside a case (`harness bench --peers mlx`): the
                    mlx-metal wheel's headers, our launch of each from MLX's host code

One number, e.g. `device_load_ops` of `copy/k-transpose-f16` in bench.md: the case's params
(cases.py) -> `measure_case` compiles and runs it once on the emulator; the emulator's
per-launch counters are summed into `CaseMeasurement.counters` (measure.py) and priced per
chip into `CaseMeasurement.modeled` (roofline.py) -> `write_results` writes them to
reports/out/bench.json, and the baseline holds the passing value (baseline.py) -> `compare`
sets the two side by side as a `Change` when they differ (gate.py) -> `write_reports`
prints the tables (report.py).
"""
