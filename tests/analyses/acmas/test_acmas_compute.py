"""AcMAS pure parts against references: detectors, metrics, transcripts, config, results."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.covariance import LedoitWolf
from sklearn.metrics import average_precision_score, f1_score, roc_auc_score

from workbench.analyses import acmas
from workbench.analyses.acmas import transcripts as tr
from workbench.analyses.acmas.results import FIGURES, AcmasResult, RestorationResult
from workbench.errors import ConfigError, DetectorError, TranscriptError


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_detection_metrics_match_sklearn_and_hand_fpr():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    s = y + rng.normal(0, 1, 200)
    p = (s > 0.5).astype(int)
    f1, auroc, fpr = acmas.detection_metrics(y, s, p)
    assert f1 == pytest.approx(f1_score(y, p))
    assert auroc == pytest.approx(roc_auc_score(y, s))
    assert fpr == pytest.approx(((p == 1) & (y == 0)).sum() / (y == 0).sum())
    assert np.isnan(acmas.detection_metrics(np.zeros(5), np.arange(5.0), np.zeros(5))[1])


def test_prototype_is_the_cosine_distance_to_the_normalized_benign_centroid():
    rng = np.random.default_rng(1)
    X = rng.normal(1, 1, (60, 5))
    y = (np.arange(60) >= 50).astype(int)
    det = acmas.PrototypeDetector(quantile=0.9, n_folds=1).fit(X, y)  # in-sample threshold
    proto = _unit(_unit(X[:50]).mean(0))
    np.testing.assert_allclose(det.prototype_, proto, rtol=1e-12)
    d = 1 - _unit(X) @ proto
    np.testing.assert_allclose(det.decision_function(X), d, rtol=1e-10)
    assert det.threshold_ == pytest.approx(np.quantile(d[:50], 0.9))
    np.testing.assert_array_equal(det.predict(X), (d > det.threshold_).astype(int))
    assert clone(det).get_params() == det.get_params()


def test_moving_prototype_follows_the_unflagged_messages_round_by_round():
    rng = np.random.default_rng(2)
    C, X = rng.normal(1, 1, (30, 4)), rng.normal(1, 1, (12, 4))
    groups = np.repeat([0, 1, 2], 4)
    det = acmas.PrototypeDetector(update="moving", momentum=0.7).fit(C)
    got = det.decision_function(X, groups=groups)
    p, want = det.prototype_.copy(), np.empty(12)
    for g in range(3):
        rows = np.flatnonzero(groups == g)
        want[rows] = 1 - _unit(X[rows]) @ p
        keep = rows[want[rows] <= det.threshold_]
        if len(keep):
            p = _unit(0.7 * p + 0.3 * _unit(X[keep]).mean(0))
    np.testing.assert_allclose(got, want, rtol=1e-10)
    fixed = acmas.PrototypeDetector(update="fixed").fit(C)
    np.testing.assert_allclose(
        fixed.decision_function(X, groups=groups), 1 - _unit(X) @ fixed.prototype_
    )


def test_per_agent_prototypes_use_each_agents_own_benign_centroid():
    rng = np.random.default_rng(3)
    C = np.concatenate([rng.normal(5, 1, (20, 3)), rng.normal(-5, 1, (20, 3))])
    agents = np.repeat([0, 1], 20)
    det = acmas.PrototypeDetector().fit(C, agents=agents)
    np.testing.assert_allclose(det.agent_prototypes_[1], _unit(_unit(C[20:]).mean(0)))
    X = C[[0, 25]]
    want = [1 - _unit(X[0]) @ det.agent_prototypes_[0], 1 - _unit(X[1]) @ det.agent_prototypes_[1]]
    np.testing.assert_allclose(det.decision_function(X, agents=np.array([0, 1])), want)


def test_the_threshold_is_a_quantile_of_held_out_benign_distances():
    """Cross-fitting by hand: each fold's distances to a prototype fitted on the other folds."""
    rng = np.random.default_rng(5)
    X = rng.normal(1, 1, (60, 4))
    agents = np.repeat([0, 1, 2], 20)
    det = acmas.PrototypeDetector(quantile=0.9, n_folds=4, random_state=3).fit(X, agents=agents)
    folds = np.random.default_rng(3).permutation(60) % 4
    held = np.empty(60)
    for f in range(4):
        out = folds == f
        Z = _unit(X[~out])
        protos = {a: _unit(Z[agents[~out] == a].mean(0)) for a in range(3)}
        held[out] = [1 - _unit(x) @ protos[a] for x, a in zip(X[out], agents[out], strict=True)]
    assert det.threshold_ == pytest.approx(np.quantile(held, 0.9))
    insample = acmas.PrototypeDetector(quantile=0.9, n_folds=1).fit(X, agents=agents)
    assert insample.threshold_ < det.threshold_  # in-sample distances understate new ones


def test_mahalanobis_prototype_is_the_whitened_distance_to_each_agents_centroid():
    rng = np.random.default_rng(6)
    C = rng.normal(0, 1, (80, 3)) * [1.0, 5.0, 0.2] + np.repeat([[0, 0, 0], [3, 0, 0]], 40, 0)
    agents = np.repeat([0, 1], 40)
    det = acmas.PrototypeDetector(metric="mahalanobis", n_folds=1).fit(C, agents=agents)
    means = np.stack([C[:40].mean(0), C[40:].mean(0)])
    lw = LedoitWolf().fit(C - means[agents])
    X = np.array([[0.0, 4.0, 0.0], [0.0, 0.0, 1.0]])
    diff = X - means[0]
    want = np.einsum("nd,de,ne->n", diff, np.linalg.inv(lw.covariance_), diff)
    got = det.decision_function(X, agents=np.array([0, 0]))
    np.testing.assert_allclose(got, want, rtol=1e-8)
    assert got[1] > got[0]  # a small shift along a quiet direction outweighs a large noisy one


def test_context_offsets_are_the_least_squares_additive_effects():
    rng = np.random.default_rng(11)
    agents = rng.integers(0, 4, 300)
    contexts = rng.choice([0, 1, 2], 300, p=[0.1, 0.3, 0.6])  # unbalanced, as an async run
    a_eff, c_eff = rng.normal(0, 3, (4, 5)), rng.normal(0, 2, (3, 5))
    X = a_eff[agents] + c_eff[contexts] + rng.normal(0, 0.5, (300, 5))
    got = acmas.detectors.context_offsets(X, agents, contexts)
    design = np.concatenate([np.eye(4)[agents], np.eye(3)[contexts]], axis=1)
    coef = np.linalg.lstsq(design, X, rcond=None)[0]  # rank-deficient: min-norm solution
    fitted = design @ coef
    ours = np.stack([got[c] for c in contexts])
    means = np.stack([(X - ours)[agents == a].mean(0) for a in range(4)])
    np.testing.assert_allclose(means[agents] + ours, fitted, atol=1e-8)
    np.testing.assert_allclose(sum(got[c] * (contexts == c).sum() for c in got), 0, atol=1e-9)


def test_context_offsets_keep_a_rare_context_out_of_the_benign_tail():
    rng = np.random.default_rng(12)
    n = 400
    agents = rng.integers(0, 4, n)
    contexts = (rng.random(n) < 0.06).astype(int)  # a rare turn shape moves every activation
    shape = np.array([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 4.0, 0.0]])
    C = np.eye(4)[agents] * 3 + shape[contexts] + rng.normal(0, 1, (n, 4))
    Xb = np.eye(4)[[0, 1, 2, 3]] * 3 + shape[1] + rng.normal(0, 1, (4, 4))  # benign, rare shape
    Xc = np.eye(4)[[0, 1]] * 3 + [[0, 0, 0, 6.0]] * 2  # compromised: a shift nobody makes
    X = np.concatenate([Xb, Xc])
    ax, cx = np.array([0, 1, 2, 3, 0, 1]), np.array([1, 1, 1, 1, 0, 0])
    plain = acmas.PrototypeDetector(metric="mahalanobis").fit(C, agents=agents)
    shaped = acmas.PrototypeDetector(metric="mahalanobis").fit(C, agents=agents, contexts=contexts)
    assert set(shaped.context_offsets_) == {0, 1}
    np.testing.assert_allclose(
        shaped.context_offsets_[1] - shaped.context_offsets_[0], shape[1], atol=0.4
    )
    flags = shaped.predict(X, agents=ax, contexts=cx)
    assert flags.tolist() == [0, 0, 0, 0, 1, 1]
    # without the context the rare shape's spread inflates the covariance along it: the benign
    # rows of that shape score far above the shaped detector's
    assert (
        plain.decision_function(Xb, agents=ax[:4]).mean()
        > 2 * shaped.decision_function(Xb, agents=ax[:4], contexts=cx[:4]).mean()
    )
    with pytest.raises(DetectorError, match="contexts has shape"):
        shaped.decision_function(X, agents=ax, contexts=cx[:3])


def _two_views(seed=11):
    """Calibration and test rows of three agents in two views (6 and 4 columns)."""
    rng = np.random.default_rng(seed)
    agents = np.repeat([0, 1, 2], 30)
    C = rng.normal(0, 1, (90, 10)) + np.repeat(rng.normal(0, 3, (3, 10)), 30, 0)
    X = C[::3] + rng.normal(0, 0.3, (30, 10))
    return C, agents, X, agents[::3]


def test_alarmed_prototype_flags_either_views_excess_over_its_own_cut():
    C, agents, X, xa = _two_views()
    X[4, 6:] += 40.0  # far out in the alarm view only
    X[7, :6] += 40.0  # far out in the main view only
    det = acmas.AlarmedPrototypeDetector(6, metric="mahalanobis").fit(C, agents=agents)
    main = acmas.PrototypeDetector(metric="mahalanobis").fit(C[:, :6], agents=agents)
    alarm = acmas.PrototypeDetector(quantile=1.0, metric="mahalanobis").fit(C[:, 6:], agents=agents)
    assert det.cuts_ == pytest.approx((main.threshold_, alarm.threshold_))
    d_main = main.decision_function(X[:, :6], agents=xa)
    d_alarm = alarm.decision_function(X[:, 6:], agents=xa)
    want = np.maximum(d_main / main.threshold_, d_alarm / alarm.threshold_)
    np.testing.assert_allclose(det.decision_function(X, agents=xa), want, rtol=1e-10)
    flags = det.predict(X, agents=xa)
    np.testing.assert_array_equal(
        flags, ((d_main > main.threshold_) | (d_alarm > alarm.threshold_)).astype(int)
    )
    assert flags[4] == 1 and flags[7] == 1
    assert det.threshold_ == 1.0  # the score is each view's distance over its own cut
    assert clone(det).get_params() == det.get_params()


def test_alarmed_prototype_moves_both_views_only_with_rows_neither_flags():
    C, agents, X, xa = _two_views(12)
    groups = np.repeat(np.arange(5), 6)
    det = acmas.AlarmedPrototypeDetector(6, update="moving", metric="mahalanobis").fit(
        C, agents=agents
    )
    got_main, _ = det.view_distances(X, groups=groups, agents=xa)
    plain = acmas.PrototypeDetector(update="moving", metric="mahalanobis").fit(
        C[:, :6], agents=agents
    )
    # with no alarm firing, the main view moves exactly as the plain moving detector
    np.testing.assert_allclose(
        got_main, plain.decision_function(X[:, :6], groups=groups, agents=xa), rtol=1e-10
    )
    # a row flagged by the alarm alone moves no prototype: the later rounds then score as if
    # it had not been seen
    X[1, 6:] += 50.0
    got_main, got_alarm = det.view_distances(X, groups=groups, agents=xa)
    assert got_alarm[1] > det.cuts_[1] and got_main[1] <= det.cuts_[0]
    keep = np.arange(30) != 1
    want = plain.decision_function(X[keep, :6], groups=groups[keep], agents=xa[keep])
    np.testing.assert_allclose(got_main[keep], want, rtol=1e-10)
    moved = plain.decision_function(X[:, :6], groups=groups, agents=xa)
    assert not np.allclose(got_main[keep], moved[keep])  # the plain detector took it in


def test_alarmed_prototype_needs_a_column_for_each_view():
    C, agents, _, _ = _two_views()
    with pytest.raises(DetectorError, match="n_main=10") as err:
        acmas.AlarmedPrototypeDetector(10).fit(C, agents=agents)
    assert "\n" not in str(err.value)


def test_the_headline_prototype_takes_the_alarm_view_and_prototype_mean_does_not():
    C, agents, X, xa = _two_views(13)
    n = len(X)
    tasks, rounds = np.repeat(np.arange(10), 3), np.tile(np.arange(3), 10)
    labels = np.zeros(n, dtype=int)
    labels[[16, 19, 25]] = 1
    alarm_c, alarm_x = C[:, 6:].copy(), X[:, 6:].copy()
    alarm_x[labels == 1] += 60.0  # compromised rows stand out in the alarm view only
    args = (
        "async",
        ["final"],
        {"final": C[:, :6]},
        {"final": X[:, :6]},
        labels,
        tasks,
        rounds,
        np.zeros(n, dtype=int),
    )
    who = {"agents": xa, "calib_agents": agents}
    res = acmas.evaluate_schedule(
        *args, **who, calib_alarm={"final": alarm_c}, attacked_alarm={"final": alarm_x}
    )
    test = tasks >= 5
    head, mean_only = res.detectors.index("prototype"), res.detectors.index("prototype_mean")
    assert res.preds[head, 0][labels[test] == 1].all()
    assert not res.preds[mean_only, 0][labels[test] == 1].any()
    plain = acmas.evaluate_schedule(*args, **who)
    np.testing.assert_allclose(plain.scores[head], plain.scores[mean_only])
    np.testing.assert_allclose(plain.scores[mean_only], res.scores[mean_only])
    with pytest.raises(ValueError, match="calib_alarm"):
        acmas.evaluate_schedule(*args, calib_alarm={"final": alarm_c})


def test_peers_seen_counts_the_answers_in_a_turns_context():
    from workbench.analyses.acmas import toy

    for peers in ([], [(1, 7)], [(1, 7), (5, 2)]):
        prompt = toy.turn_prompt(toy.role_prompt(3, "note brief"), peers, 4)
        assert toy.peers_seen(prompt) == len(peers)
        assert toy.peers_seen(f"{prompt} 0 ;") == len(peers)
    with pytest.raises(ValueError, match="not a toy turn"):
        toy.peers_seen("hello world")


def test_mahalanobis_matches_ledoit_wolf_by_hand():
    rng = np.random.default_rng(4)
    C, X = rng.normal(0, 1, (80, 6)), rng.normal(0, 2, (10, 6))
    det = acmas.MahalanobisDetector().fit(C)
    lw = LedoitWolf().fit(C)
    diff = X - lw.location_
    want = np.einsum("nd,de,ne->n", diff, np.linalg.inv(lw.covariance_), diff)
    np.testing.assert_allclose(det.decision_function(X), want, rtol=1e-8)


def test_text_baseline_flags_disagreement_with_the_majority():
    X = np.array([[0, 5], [0, 5], [0, 6], [1, 2], [1, 3]])  # group 1 is a tie
    sync = acmas.TextMajorityDetector().fit()
    np.testing.assert_array_equal(sync.predict(X), [0, 0, 1, 0, 0])
    online = acmas.TextMajorityDetector(online=True).fit()
    # the first answer has nothing to disagree with; then the earlier answers' majority (a tie
    # flags nothing): 5 vs {6}, 5 vs {6, 5} tie, 5 vs {5, 5, 6}, 6 vs {5 x3, 6}
    X2 = np.array([[0, 6], [0, 5], [0, 5], [0, 5], [0, 6]])
    np.testing.assert_array_equal(online.predict(X2), [0, 1, 0, 0, 1])
    assert sync.score(X, [0, 0, 1, 0, 0]) == 1.0


@pytest.mark.parametrize("cls", [acmas.PrototypeDetector, acmas.MahalanobisDetector])
def test_too_few_benign_messages_is_a_one_line_error(cls):
    X = np.ones((12, 3))
    y = np.r_[np.zeros(4), np.ones(8)]
    with pytest.raises(DetectorError, match="4 benign messages") as err:
        cls().fit(X, y)
    assert "\n" not in str(err.value)


def _transcript():
    agents = (tr.Agent("R0", prompt="R0 sys"), tr.Agent("R1", compromised=True))
    msgs = (
        tr.Message("R0", 0, 0, 0.0, 0, "5 ;", "Q 1 = 5 ;", False, "5", "5"),
        tr.Message("R1", 0, 0, 0.0, 0, "6 ;", "", True, "6", "5"),
    )
    return tr.Transcript("sync", agents, msgs)


def test_transcript_jsonl_round_trip(tmp_path):
    t = _transcript()
    path = t.write(tmp_path / "t.jsonl")
    back = tr.read(path)
    assert back == t and back.labels == [0, 1]
    assert [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]  # atomic: no temporary left
    assert back.messages[1].context_text == "6 ;"


def _lines():
    return _transcript().to_jsonl().splitlines()


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (
            lambda ls: [*ls[:3], '{"type": "message", "sender": "R9"}'],
            "line 4: field 'sender' 'R9'",
        ),
        (lambda ls: [*ls[:3], ls[3].replace('"task": 0', '"task": "x"')], "line 4: field 'task'"),
        (
            lambda ls: [*ls[:3], ls[3].replace('"round": 0', '"round": null')],
            "line 4: field 'round'",
        ),
        (lambda ls: [*ls[:2], "{nope"], "line 3: not valid JSON"),
        (lambda ls: ls[1:], "line 1: field 'type'"),
        (lambda ls: [ls[0].replace("sync", "later")], "line 1: field 'schedule'"),
    ],
)
def test_a_line_that_breaks_the_schema_is_named(edit, match):
    with pytest.raises(TranscriptError, match=match) as err:
        tr.parse("\n".join(edit(_lines())))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"frac_malicious": 1.0}, "frac_malicious"),
        ({"frac_malicious": -0.1}, "frac_malicious"),
        ({"schedule": "later"}, "schedule"),
        ({"layers": "early,top"}, "layers"),
        ({"attack": "loud"}, "attack"),
        ({"n_agents": 0}, "n_agents"),
        ({"n_agents": 17}, "n_agents"),
        ({"model": "gpt2"}, "transcripts"),
        ({"alarm": "first"}, "alarm"),
    ],
)
def test_bad_config_is_a_one_line_error(kw, field):
    with pytest.raises(ConfigError, match=field) as err:
        acmas.AcmasConfig(**kw)
    assert "\n" not in str(err.value)


def _result():
    rng = np.random.default_rng(5)
    labels = np.r_[np.zeros(12), np.ones(4)].astype(int)
    scheds = []
    for name in ("sync", "async"):
        n_det = len(acmas.DETECTORS)
        scores = rng.random((n_det, 3, 16))
        scheds.append(
            acmas.ScheduleResult(
                name,
                ("early", "middle", "final"),
                acmas.DETECTORS,
                rng.random((n_det, 3)),
                rng.random((n_det, 3)),
                rng.random((n_det, 3)),
                scores,
                (scores > 0.5).astype(int),
                labels,
                (rng.random(16) > 0.5).astype(float),
                (0.5, 0.6, 0.1),
                np.repeat(np.arange(8), 2),
            )
        )
    rest = RestorationResult(
        ("none", "isolate", "steer"), [0.8, 0.7, 0.9], [1, 0, 0.2], (1,), (1,), "middle"
    )
    return AcmasResult("toy", tuple(scheds), rest, ["a note"])


def test_results_round_trip_metrics_keys_and_figures():
    result = _result()
    back = AcmasResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert json.dumps(back.to_dict()) == json.dumps(result.to_dict())
    m = result.metrics()
    assert tuple(m) == acmas.METRIC_KEYS
    assert set(m["f1_by_layer"]) == {"early", "middle", "final"}
    assert m["f1_sync"] == pytest.approx(result.schedules[0].f1[0, -1], abs=1e-4)
    s0 = result.schedules[0]
    assert m["ap_sync"] == pytest.approx(
        average_precision_score(s0.labels, s0.scores[0, -1]), abs=1e-4
    )
    lo, hi = m["ci95"]["sync"]["prototype"]["auroc"]
    assert 0 <= lo <= hi <= 1
    assert result.figure_kinds() == list(FIGURES)
    for kind in result.figure_kinds():
        assert len(result.figure(kind).data) > 0
    with pytest.raises(ValueError, match="shape"):
        acmas.ScheduleResult(
            "sync",
            ("final",),
            acmas.DETECTORS,
            np.zeros((3, 2)),
            np.zeros((3, 1)),
            np.zeros((3, 1)),
            np.zeros((3, 1, 2)),
            np.zeros((3, 1, 2)),
            [0, 1],
            [0, 1],
            (0, 0, 0),
        )
