"""Claims as data: checking one run, judging many (robust or fragile), and the 95% interval."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from workbench.analyses import ANALYSES, registry
from workbench.claims import (
    Claim,
    check_claims,
    evaluate,
    lookup,
    summarize,
    verdict,
)

METRICS = {
    "f1": 0.95,
    "base": 0.5,
    "by_layer": {"early": 0.7, "final": 0.9},
    "curve": [3.0, 2.0, -1.0],
    "monotone": True,
    "missing": None,
    "nan": float("nan"),
}


def test_lookup_follows_dotted_paths_and_refuses_what_is_not_a_number():
    assert lookup(METRICS, "f1") == 0.95
    assert lookup(METRICS, "by_layer.final") == 0.9
    assert lookup(METRICS, "curve.-1") == -1.0
    assert lookup(METRICS, "monotone") == 1.0
    for path in ("missing", "nan", "absent", "by_layer.middle", "curve.7", "curve.x", "by_layer"):
        assert lookup(METRICS, path) is None, path


@pytest.mark.parametrize(
    ("claim", "value", "threshold", "holds"),
    [
        (Claim("a", "f1", ">=", 0.9), 0.95, 0.9, True),
        (Claim("b", "f1", "<", 0.9), 0.95, 0.9, False),
        (Claim("c", "f1", ">", "base", factor=2.0), 0.95, 1.0, False),
        (Claim("d", "by_layer.final", ">=", "by_layer.early"), 0.9, 0.7, True),
        (Claim("e", "f1", ">", 0.3, minus="base"), 0.45, 0.3, True),
        (Claim("f", "curve.-1", "<=", 0.0), -1.0, 0.0, True),
        (Claim("g", "missing", ">", 0.0), None, 0.0, None),
        (Claim("h", "f1", ">", "missing"), 0.95, None, None),
    ],
)
def test_a_claim_is_checked_with_its_margin(claim, value, threshold, holds):
    r = claim.check(METRICS)
    assert r.value == pytest.approx(value) if value is not None else r.value is None
    assert r.threshold == pytest.approx(threshold) if threshold is not None else True
    assert r.holds is holds
    if holds is not None:
        sign = 1 if claim.op in (">=", ">") else -1
        assert r.margin == pytest.approx(sign * (r.value - r.threshold))


def test_strict_and_loose_comparisons_differ_at_the_threshold():
    m = {"x": 0.9}
    assert Claim("a", "x", ">=", 0.9).check(m).holds is True
    assert Claim("b", "x", ">", 0.9).check(m).holds is False


def test_bad_claims_are_refused():
    with pytest.raises(ValueError, match="op"):
        Claim("a", "x", "=>", 1.0)
    with pytest.raises(ValueError, match="factor"):
        Claim("a", "x", ">", 1.0, factor=2.0)
    with pytest.raises(ValueError, match="not a metric"):
        check_claims([Claim("a", "x", ">", "y")], ["x"])


def test_a_table_shows_itself_and_round_trips_through_results_json():
    table = evaluate([Claim("good", "f1", ">=", 0.9), Claim("bad", "base", ">", 0.9)], METRICS)
    assert not table.all_hold and table.failed() == ["bad"]
    text = repr(table)
    assert text.splitlines()[0] == "1/2 claims hold" and "FAILS" in text
    html = table._repr_html_()
    assert "good" in html and "f1 &gt;= 0.9" in html and "fails" in html
    for record, result in zip(table.to_list(), table, strict=True):
        assert record["holds"] is result.holds and record["value"] == result.value
        again = Claim.from_record(record)
        assert again == result.claim


def test_summary_interval_matches_scipy():
    rng = np.random.default_rng(0)
    xs = rng.normal(1.0, 2.0, 10).tolist()
    s = summarize([*xs, None])
    lo, hi = stats.t.interval(0.95, len(xs) - 1, loc=np.mean(xs), scale=stats.sem(xs))
    assert s.n == 10 and s.missing == 1
    assert s.mean == pytest.approx(np.mean(xs)) and s.sd == pytest.approx(np.std(xs, ddof=1))
    assert s.ci95 == pytest.approx((lo, hi))
    assert (s.min, s.max) == (min(xs), max(xs))
    assert summarize([None]).mean is None and summarize([2.0]).ci95 == (2.0, 2.0)


def test_verdict_is_robust_only_with_share_and_interval():
    claim = Claim("x positive", "x", ">", 0.0)
    robust = verdict(claim, [{"x": v} for v in (0.5, 0.6, 0.55, 0.7, 0.52)])
    assert robust.verdict == "robust" and robust.share == 1.0
    # holds in 9 of 10 runs but one run is far on the wrong side: the interval crosses zero
    runs = [{"x": 0.1}] * 9 + [{"x": -5.0}]
    shaky = verdict(claim, runs)
    assert shaky.held == 9 and math.isclose(shaky.share, 0.9)
    assert shaky.margin.ci95[0] < 0 and shaky.verdict == "fragile"
    # holds in 8 of 10: below the 90% share even though the mean is well above zero
    runs = [{"x": 2.0}] * 8 + [{"x": -0.1}] * 2
    assert verdict(claim, runs).verdict == "fragile"
    # a run where the claim was not measured keeps it from being robust
    assert verdict(claim, [{"x": 1.0}] * 5 + [{"x": None}]).verdict == "fragile"
    assert verdict(claim, [{"x": 1.0}]).verdict == "fragile"  # one run is not a replication


@pytest.mark.parametrize("analysis", ANALYSES)
def test_every_study_declares_claims_on_its_own_metrics(analysis):
    study = registry.get(analysis)
    assert study.claims, f"{analysis} declares no claims"
    check_claims(study.claims, study.metric_keys)
    assert len({c.name for c in study.claims}) == len(study.claims)


def test_a_run_that_could_not_judge_a_claim_keeps_it_from_being_robust():
    from workbench.runner.replicate import not_evaluable

    claim = Claim("positive", "x", ">", 0.0)
    runs = [{"x": 1.0}] * 10
    assert verdict(claim, runs).verdict == "robust"
    flags = [False] * 9 + [True]  # one run's training missed its criterion
    judged = verdict(claim, runs, flags)
    assert judged.verdict == "fragile" and judged.held == 9 and judged.missing == 1
    record = {"claims": [{"name": "positive", "holds": None, "not_evaluable": "why"}]}
    assert not_evaluable(record, "positive") and not not_evaluable(record, "other")
    assert not not_evaluable({"claims": [{"name": "positive", "holds": True}]}, "positive")
