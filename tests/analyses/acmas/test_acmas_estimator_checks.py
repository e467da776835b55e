"""The detectors against scikit-learn's own estimator checks (the contract they claim).

They are anomaly detectors, not classifiers: ``y`` given to ``fit`` only selects the benign rows
(``y == 0``), ``decision_function`` is an anomaly score and ``predict`` 0/1. The checks that
cannot apply are listed with the reason; every other check must pass.
"""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from workbench.analyses import acmas

_NO_BENIGN = (
    "this check's y has no or too few zeros, and only benign rows (y == 0) are fitted on; the "
    "detector refuses with a one-line DetectorError naming the count"
)
_PAIRS = "X is (group, answer) pairs by definition: this check gives other column counts"
_DISTANCE = {
    "check_estimators_dtypes": _NO_BENIGN,
    "check_fit2d_1sample": _NO_BENIGN,
    "check_fit2d_1feature": _NO_BENIGN,
}
_TEXT = {
    name: _PAIRS
    for name in (
        "check_fit_score_takes_y",
        "check_dont_overwrite_parameters",
        "check_n_features_in_after_fitting",
        "check_estimators_dtypes",
        "check_dtype_object",
        "check_pipeline_consistency",
        "check_estimators_nan_inf",
        "check_estimators_pickle",
        "check_f_contiguous_array_estimator",
        "check_methods_sample_order_invariance",
        "check_methods_subset_invariance",
        "check_fit2d_1sample",
        "check_fit2d_1feature",
        "check_dict_unchanged",
        "check_fit2d_predict1d",
    )
} | {"check_positive_only_tag_during_fit": _PAIRS}


def _expected(estimator):
    if isinstance(estimator, acmas.TextMajorityDetector):
        return _TEXT
    if isinstance(estimator, acmas.AlarmedPrototypeDetector):
        # one feature is refused before any row is counted: two views need a column each
        return {k: v for k, v in _DISTANCE.items() if k != "check_fit2d_1feature"}
    return _DISTANCE


@parametrize_with_checks(
    [
        acmas.PrototypeDetector(min_benign=1),
        acmas.PrototypeDetector(metric="mahalanobis", update="moving", min_benign=1),
        acmas.MahalanobisDetector(min_benign=1),
        acmas.AlarmedPrototypeDetector(min_benign=1),
        acmas.AlarmedPrototypeDetector(update="moving", metric="cosine", min_benign=1),
        acmas.TextMajorityDetector(),
    ],
    expected_failed_checks=_expected,
)
def test_sklearn_estimator_contract(estimator, check):
    check(estimator)
