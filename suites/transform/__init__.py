"""IR-in / IR-out tests, one file per pass of core/transform/pipeline.py (`test_<pass>.py`).

Each test parses a small DSL kernel, runs the pipeline to the pass before and to the pass
itself (`pipeline.run(func, stop_after=...)`) and asserts what the pass's contract (its
module docstring) guarantees on the IR that comes out. No kernel runs here.

This file makes the folder a package: pytest then imports its modules as
`transform.test_<pass>`, so a name another folder uses too (suites/core/test_stream_rows.py)
does not clash.
"""
