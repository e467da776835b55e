"""Provenance names the numerics: CPU kernel level, CPU model, threads, MKL and oneDNN versions."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from workbench import capture, load_model
from workbench.provenance import NUMERICS, numerics
from workbench.runner.results import complete_provenance, read_results, save_results


def test_numerics_describe_this_process():
    record = numerics()
    assert set(record) == set(NUMERICS)
    assert record["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert record["threads"] == torch.get_num_threads() >= 1
    assert record["cpu_model"]
    if torch.backends.mkl.is_available():
        assert record["mkl"] and record["mkl"][0].isdigit()
    if torch.backends.mkldnn.is_available():
        assert record["onednn"] and record["onednn"][0].isdigit()


def test_the_kernel_level_a_process_was_given_is_the_one_recorded():
    code = "import json; from workbench.provenance import numerics; print(json.dumps(numerics()))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"ATEN_CPU_CAPABILITY": "default", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    record = json.loads(out.stdout)
    assert record["cpu_capability"] == "DEFAULT"
    assert record["numerics_env"] == {"ATEN_CPU_CAPABILITY": "default"}


def test_results_json_keeps_the_kernels_numerics_when_the_runner_completes_it(tmp_path):
    save_results(tmp_path, analysis="x", params={}, metrics={"m": 1.0}, seed=3)
    raw = json.loads((tmp_path / "results.json").read_text())
    assert raw["claims"] == [] and raw["provenance"]["cpu_capability"]
    # the runner's process may run at another level: the notebook kernel's record wins
    runner_side = {"cpu_capability": "RUNNER", "git_commit": "abc", "versions": {}}
    runner_side |= {"started": "now", "seconds": 1.0}
    complete_provenance(tmp_path / "results.json", params={}, provenance=runner_side)
    record = read_results(tmp_path)
    assert record["provenance"]["cpu_capability"] == numerics()["cpu_capability"]
    assert record["provenance"]["seed"] == 3 and record["provenance"]["git_commit"] == "abc"


def test_a_store_manifest_records_the_numerics(tiny_dir, tmp_path):
    subject = load_model(tiny_dir("gpt2"), device="cpu")
    capture(subject, ["one text", "two"], sites="resid_post.0", out=tmp_path / "s", progress=False)
    prov = json.loads((tmp_path / "s" / "manifest.json").read_text())["provenance"]
    for key in ("cpu_capability", "cpu_model", "threads", "mkl", "onednn"):
        assert key in prov
    assert prov["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
