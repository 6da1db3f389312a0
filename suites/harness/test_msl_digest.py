"""The MSL of every bench case is the recorded one (reports/baselines/msl.json): a pass
refactoring that is meant to keep the generated code is checked byte for byte. A deliberate
change records the new digests with `python -m harness.bench.msl_digest --update`."""

from harness.bench import msl_digest
from harness.bench.cases import CASES


def test_every_bench_case_prints_the_recorded_msl():
    changed = msl_digest.differences(msl_digest.load(), msl_digest.current())
    assert not changed, ("generated MSL differs from reports/baselines/msl.json; if the "
                         "change is deliberate, run `python -m harness.bench.msl_digest --update`:\n"
                         + "\n".join(changed))


def test_a_changed_kernel_is_named():
    recorded = msl_digest.load()
    case = CASES[0]
    now = dict(recorded, **{case.name: msl_digest.digest("// another kernel\n")})
    assert msl_digest.differences(recorded, now) == [
        f"{case.name}: MSL changed ({recorded[case.name][:12]} -> {now[case.name][:12]})"]
