"""Champion/challenger against a real ``mlflow server`` (artifacts on moto's S3 server): the promote stage samples the
registry's champion and the run's candidate, both real checkpoints, on the same problems with the same seeds, and
decides on the paired difference, not on the scores stored on the versions; the versions carry the transformers
flavor, so the champion loads by alias as a text-generation pipeline.

The checkpoints: ``tiny_checkpoint`` (tests/conftest.py, untrained: it answers nothing) and the shipped tiny base
(pretrained on the synthetic problems: it answers most easy ones). The eval stage is a stand-in
(checkpoint_stage.py) that stores a score of our choosing on each version (value / 100).
"""

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from parathink.config.promote import PromoteConfig
from parathink.pipeline import runner
from parathink.tracking import challenge
from parathink.tracking.registry import run_candidate_alias

HERE = Path(__file__).parent
TINY_BASE = HERE.parents[1] / "src" / "parathink" / "assets" / "tiny_base"
MODEL = "parathink-tiny"


def _run(tmp: Path, uri: str, name: str, source: Path, value: int) -> list[str]:
    over = [f"run_dir={tmp / name}", "tracking=server", f"tracking.uri={uri}", "stages=[train,eval]",
            f"+stage_modules.train={HERE / 'checkpoint_stage.py'}", f"+train.source={source}", f"+train.value={value}",
            f"+stage_modules.eval={HERE / 'checkpoint_stage.py'}", "+eval.results=[train]",
            "eval.sampling.max_new_tokens=96",
            "tracking.promote.metric=easy.accuracy", "tracking.promote.problems=16", "tracking.promote.k=2"]
    assert runner.main_run(over) == 0
    return over


def _decision(tmp: Path, name: str) -> dict:
    return json.loads((tmp / name / "promote" / "promotion.json").read_text())


@pytest.mark.slow
def test_promotion_samples_champion_and_candidate_side_by_side(mlflow_server, tiny_checkpoint, tmp_path,
                                                               monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CI", "true")
    client = MlflowClient(tracking_uri=mlflow_server)

    # a: the untrained model, first of its name: promoted with nothing compared, and that recorded.
    assert runner.main_stage("promote", _run(tmp_path, mlflow_server, "a", tiny_checkpoint, 50)) == 0
    first = client.get_model_version_by_alias(MODEL, "champion")
    assert first.tags["promotion.first_champion"] == "true" and first.tags["promotion.comparison"] == "none"
    assert first.tags["parathink.flavor"] == "transformers"
    assert _decision(tmp_path, "a")["comparison"] == "none"

    # b: the pretrained base, with a LOWER stored score (0.05 < 0.50): the paired re-evaluation promotes it.
    capsys.readouterr()
    assert runner.main_stage("promote", _run(tmp_path, mlflow_server, "b", TINY_BASE, 5)) == 0
    err = capsys.readouterr().err
    b = _decision(tmp_path, "b")
    paired = b["paired"]["metrics"]["easy.accuracy"]
    assert b["promoted"] is True and b["comparison"] == "paired", err
    assert paired["n_problems"] == 16 and paired["delta"] - 2 * paired["se"] > 0, paired
    assert "| easy.accuracy |" in err and "clears margin 0 + 2 SE" in err
    second = client.get_model_version_by_alias(MODEL, "champion")
    assert second.version == b["candidate"]["version"] != first.version
    promote_run = json.loads((tmp_path / "b" / "promote" / "_manifest.json").read_text())["mlflow_run_id"]
    assert second.tags["promotion.decided_by_run"] == promote_run
    assert second.tags["promotion.comparison"] == "paired"
    assert float(second.tags["promotion.delta.easy.accuracy"]) == pytest.approx(paired["delta"], abs=1e-4)
    assert float(second.tags["promotion.se.easy.accuracy"]) == pytest.approx(paired["se"], abs=1e-4)
    assert "promotion.guard.delta.easy.parallel_rate" in second.tags
    assert second.tags["promotion.previous_champion"] == str(first.version)
    # the run's own alias points at its candidate; the per-problem records of both models are in the output
    parent = json.loads((tmp_path / "b" / "run.json").read_text())["mlflow"]["parent_run_id"]
    assert client.get_model_version_by_alias(MODEL, run_candidate_alias(parent)).version == second.version
    assert len((tmp_path / "b" / "promote" / "paired" / "champion" / "easy.jsonl").read_text().splitlines()) == 16

    # c: the untrained model again, with a HIGHER stored score (0.99): the paired re-evaluation keeps the champion.
    assert runner.main_stage("promote", _run(tmp_path, mlflow_server, "c", tiny_checkpoint, 99)) == 0
    c = _decision(tmp_path, "c")
    assert c["promoted"] is False and c["paired"]["metrics"]["easy.accuracy"]["delta"] < 0
    assert client.get_model_version_by_alias(MODEL, "champion").version == second.version
    loser = client.get_model_version(MODEL, c["candidate"]["version"]).tags
    assert loser["promotion.decision"] == "kept" and "does not clear" in loser["promotion.why"]

    # the champion, by alias, as a consumer loads it: a text-generation pipeline with the format's tag tokens
    import mlflow

    mlflow.set_tracking_uri(mlflow_server)
    info = mlflow.models.get_model_info(f"models:/{MODEL}@champion")
    meta = info.metadata
    assert meta["parathink.format"] == "parallel_r1" and "<Parallel>" in meta["parathink.tag_tokens"]
    assert "<Summary>" in meta["parathink.grammar"] and info.signature is not None
    assert meta["parathink.decode"] == {"mode": "structured", "num_paths": 3}  # the run's eval (experiment tiny)
    pipe = mlflow.transformers.load_model(f"models:/{MODEL}@champion")
    assert type(pipe).__name__ == "TextGenerationPipeline"
    for tag, token_id in meta["parathink.tag_token_ids"].items():  # one token each, kept in the text when asked
        assert pipe.tokenizer.encode(tag, add_special_tokens=False) == [token_id]
        assert pipe.tokenizer.decode([token_id], **meta["parathink.generate_kwargs"]) == tag
    out = pipe(meta["parathink.prompt"].format(problem="Tom has 3 apples and buys 4 more. How many now?"),
               max_new_tokens=40, do_sample=False, return_full_text=False)
    assert isinstance(out[0]["generated_text"], str) and out[0]["generated_text"]
    _version_page(mlflow_server, second.version, tmp_path)


def _version_page(url: str, version: str, tmp_path: Path) -> None:
    """The champion's page in MLflow's UI (headless Chromium with the system driver, as tests/dags/test_dag_server.py
    drives it) lists the decision tags; the screenshot goes to PARATHINK_SCREENSHOT_DIR (docs/img to refresh the
    docs' copy), else the test's folder."""
    import os
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    assert shutil.which("chromium") and shutil.which("chromedriver"), "no chromium/chromedriver: `make chromium`"
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
             "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--window-size=1100,1700",
             f"--user-data-dir={tmp_path / 'profile'}"]
    for flag in flags:
        options.add_argument(flag)
    drv = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    drv.implicitly_wait(60)
    try:
        drv.get(f"{url}/#/models/{MODEL}/versions/{version}")
        row = drv.find_element(By.XPATH, "//*[normalize-space()='promotion.delta.easy.accuracy']")
        drv.execute_script("arguments[0].scrollIntoView({block: 'start'})", row)  # the tag table scrolls by itself
        page = drv.find_element(By.TAG_NAME, "body").text
        assert "promotion.decision" in page and "promoted" in page and "promotion.decided_by_run" in page
        shots = Path(os.environ.get("PARATHINK_SCREENSHOT_DIR") or tmp_path)
        drv.save_screenshot(str(shots / "mlflow-model-version-decision.png"))
    finally:
        drv.quit()


def _comp(delta: float, se: float, guard: float) -> dict:
    row = lambda d, s: {"candidate": 0.5 + d, "champion": 0.5, "delta": d, "se": s, "n_problems": 100}  # noqa: E731
    return {"metrics": {"hard.accuracy": row(delta, se)},
            "guards": {"hard.parallel_rate": row(guard, 0.01), "hard.valid_rate": row(0.0, 0.0)},
            "problems": 100, "k": 4}


def test_the_paired_rule_needs_the_margin_plus_ses_and_no_guard_falling():
    rule = PromoteConfig(metric="hard.accuracy", margin=0.01, ses=2.0, guards={"parallel_rate": 0.05,
                                                                               "valid_rate": 0.05})
    assert challenge.decide(_comp(0.08, 0.03, 0.0), rule)[0] is True  # 0.08 - 0.01 > 2 x 0.03
    ok, why = challenge.decide(_comp(0.06, 0.03, 0.0), rule)  # 0.05 < 0.06: within noise
    assert not ok and "does not clear margin 0.01 + 2 SE" in why
    ok, why = challenge.decide(_comp(0.20, 0.03, -0.10), rule)  # a clear win that drops the parallel rate
    assert not ok and "guard hard.parallel_rate fell -0.1000" in why
    assert challenge.decide(_comp(0.20, 0.03, -0.04), rule)[0] is True  # within the guard's allowance
    tags = challenge.tags(_comp(0.08, 0.03, 0.0), "run123")
    assert tags["promotion.delta.hard.accuracy"] == "0.0800" and tags["promotion.se.hard.accuracy"] == "0.0300"
    assert tags["promotion.guard.delta.hard.parallel_rate"] == "0.0000" and tags["promotion.decided_by_run"] == "run123"
