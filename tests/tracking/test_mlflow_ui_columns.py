"""MLflow's own UI, in headless Chromium, shows what parathink records to tell runs apart and line them up.

Two curricula of different experiments and stage lists (``tiny``: prep -> train -> tune -> eval, from inside an
Airflow-like task context; ``npr_tiny``: prep -> train -> eval, by hand) run through the real runner into a real
``mlflow server`` (artifacts on moto's S3 server). The stages are the runner tests' plug-in stages
(tests/stages/resume_stage.py), stand-ins for training and eval that write the results.json the real eval writes;
everything that reaches MLflow (run names, lineage tags, stage-named and ``final.*`` metrics) goes through
parathink's own tracking code (parathink.tracking.curriculum).

- The runs table of both experiments, with the lineage tags and ``final.*`` metrics picked in its Columns menu as a
  user does, must show each parent run by name and, on that run's row, its tags and metric values.
- The compare view of the two parents must put each ``final.*`` metric on one row holding both runs' values, while a
  stage-named metric of a stage only one experiment has (``tune.hard.accuracy``) has a value for one run only.

Screenshots go to PARATHINK_SCREENSHOT_DIR (docs/img refreshes the docs' copies), else the test's folder.
"""

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from parathink.pipeline import runner

AIRFLOW = {"AIRFLOW_CTX_DAG_ID": "parathink_nightly", "AIRFLOW_CTX_DAG_RUN_ID": "scheduled__2026-12-03T02:00:00",
           "AIRFLOW_CTX_TRY_NUMBER": "1"}
TAGS = ["parathink.git_commit", "parathink.config_hash", "parathink.run_dir", "parathink.final_stage",
        "airflow.run_id"]
FINAL = ["final.hard.accuracy", "final.hard.parallel_rate", "final.hard.relative_position"]
# The Columns menu's entries, toggled: Dataset and Models off (the stand-ins log neither), the rest on.
TOGGLE = ["Dataset", "Models", "Experiment Name", *FINAL, *TAGS]


def _curriculum(make_curriculum, url: str, experiment: str, run_dir: Path, seed: int, stages: tuple[str, ...],
                results: str) -> str:
    """Run the plug-in curriculum tracked to ``url``; its parent run id."""
    c = make_curriculum(tracking="server")
    c.run_dir = str(run_dir)
    c.sections["eval"] = {"steps": 1, "results": results}
    assert runner.main_run(c.overrides(f"tracking.uri={url}", f"experiment_name={experiment}", f"seed={seed}",
                                       stages=stages)) == 0
    return json.loads((run_dir / "run.json").read_text())["mlflow"]["parent_run_id"]


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert shutil.which("chromium") and shutil.which("chromedriver"), "no chromium/chromedriver: `make chromium`"
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    # The machine's network is closed: no background fetches, no component updates, no sync, a fresh profile (the UI
    # keeps its column choices in the profile's local storage).
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--window-size=1900,900",
                 f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    drv = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)  # downloads nothing
    drv.implicitly_wait(60)
    try:
        yield drv
    finally:
        drv.quit()


def _close_assistant(drv) -> None:
    """MLflow 3's assistant panel opens on a fresh profile and covers a third of the page."""
    from selenium.webdriver.common.by import By

    drv.implicitly_wait(2)
    for button in drv.find_elements(By.XPATH, "//button[@aria-label='Close']"):
        button.click()
    drv.implicitly_wait(60)


def _runs_table(drv, url: str, experiments: str, runs: list, shot: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    drv.get(f"{url}/#/compare-experiments/s?experiments={experiments}")
    drv.find_element(By.XPATH, f"//*[normalize-space()='{runs[0].info.run_name}']")
    _close_assistant(drv)
    drv.find_element(By.XPATH, "//button[normalize-space()='Columns']").click()
    for entry in TOGGLE:  # the checkbox beside the entry's title in the menu's tree
        box = drv.find_element(By.XPATH, f"//span[@title='{entry}']/preceding-sibling::span[contains(@class, "
                                         "'tree-checkbox')]")
        drv.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)
        box.click()
    drv.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
    # Wide enough for the whole name (the table's default cuts it after ~20 characters).
    handle = drv.find_element(By.XPATH, "//div[@col-id='attributes.`Run Name`'][contains(@class, 'ag-header-cell')]"
                                        "//div[contains(@class, 'ag-header-cell-resize')]")
    ActionChains(drv).click_and_hold(handle).move_by_offset(250, 0).release().perform()
    headers = {h.get_attribute("col-id"): h.text for h in
               drv.find_elements(By.XPATH, "//div[contains(@class, 'ag-header-cell ')][@col-id]")}
    for key in [*FINAL, *TAGS[:-1]]:  # the last may sit past the right edge, unrendered; its cells are checked below
        kind = "metrics" if key.startswith("final.") else "tags"
        assert headers.get(f"{kind}.`{key}`") == key, (key, headers)
    for run in runs:
        row = drv.find_element(By.XPATH, f"//*[normalize-space()='{run.info.run_name}']/ancestor::div[@role='row']")
        cells = {c.get_attribute("col-id"): c.text for c in drv.find_elements(
            By.XPATH, f"//div[@role='row'][@row-index='{row.get_attribute('row-index')}']/div[@col-id]")}
        assert cells["attributes.`Experiment Name`"] == f"parathink-{run.data.tags['parathink.experiment']}"
        for key in FINAL:
            assert float(cells[f"metrics.`{key}`"]) == pytest.approx(run.data.metrics[key], abs=1e-3), key
        for key in TAGS:
            assert cells[f"tags.`{key}`"] == run.data.tags.get(key, "-"), (key, cells)
        # The Source column (MLflow's own, on by default): what started the run, not "-".
        source = [text for col, text in cells.items() if col.endswith("`Source`")]
        assert source and run.data.tags["mlflow.source.name"] in source[0], (source, cells)
    ActionChains(drv).move_to_element(drv.find_element(  # away from the headers: no tooltip in the shot
        By.XPATH, "//*[normalize-space()='Displaying Runs from 2 Experiments']")).perform()
    drv.set_window_size(1900, 450)
    time.sleep(1)  # the tooltip fades out
    drv.save_screenshot(str(shot))


def _compare_view(drv, url: str, experiments: str, runs: list, shot: Path) -> None:
    from selenium.webdriver.common.by import By

    drv.set_window_size(1600, 1500)
    drv.get(f"{url}/#/compare-runs?runs={json.dumps([r.info.run_id for r in runs])}&experiments={experiments}")
    drv.find_element(By.XPATH, "//*[normalize-space()='Comparing 2 Runs from 2 Experiments']")
    _close_assistant(drv)
    for section in ("Visualizations", "Parameters", "Artifacts"):  # folded: the metrics table comes into the shot
        drv.find_element(By.XPATH, f"//div[@role='button'][@aria-expanded='true'][normalize-space()='{section}']").click()
    for run in runs:
        drv.find_element(By.XPATH, f"//*[normalize-space()='{run.info.run_name}']")

    def row(key: str) -> list[str]:
        """The values on the metric's row: the table is two grids, names and values, so a row is a height."""
        name = drv.find_element(By.XPATH, f"//div[@role='grid']//a[normalize-space()='{key}']/..")
        values = name.find_element(By.XPATH, "./following::div[@role='grid'][1]/div[@role='rowgroup']")
        return [v.text for v in values.find_elements(By.XPATH, "./div") if abs(v.rect["y"] - name.rect["y"]) < 2]

    for key in FINAL:  # one row, both runs, in the order of the view's columns (the URL's)
        assert [float(v) for v in row(key)] == pytest.approx([r.data.metrics[key] for r in runs], abs=1e-3), key
    assert row("tune.hard.accuracy") == [f"{runs[0].data.metrics['tune.hard.accuracy']:g}", "NaN"]
    drv.execute_script("window.scrollTo(0, 0)")
    drv.save_screenshot(str(shot))


@pytest.mark.slow
def test_runs_table_and_compare_view_show_names_lineage_and_final_metrics(mlflow_server, make_curriculum, tmp_path,
                                                                          monkeypatch, browser):
    for k, v in AIRFLOW.items():
        monkeypatch.setenv(k, v)
    a = _curriculum(make_curriculum, mlflow_server, "tiny", tmp_path / "nightly" / "2026-12-03", 0,
                    ("prep", "train", "tune", "eval"), "[train,tune]")
    for k in AIRFLOW:
        monkeypatch.delenv(k)
    b = _curriculum(make_curriculum, mlflow_server, "npr_tiny", tmp_path / "runs" / "npr-s1", 1,
                    ("prep", "train", "eval"), "[train]")
    client = MlflowClient(tracking_uri=mlflow_server)
    runs = [client.get_run(a), client.get_run(b)]
    # what the UI must show, as the tracking code recorded it
    assert runs[0].info.experiment_id != runs[1].info.experiment_id
    assert [r.data.tags["parathink.final_stage"] for r in runs] == ["tune", "train"]
    assert "tune.hard.accuracy" not in runs[1].data.metrics and "airflow.run_id" not in runs[1].data.tags
    experiments = json.dumps(sorted(r.info.experiment_id for r in runs))
    shots = Path(os.environ.get("PARATHINK_SCREENSHOT_DIR") or tmp_path)

    _runs_table(browser, mlflow_server, experiments, runs, shots / "mlflow-runs-table.png")
    _compare_view(browser, mlflow_server, experiments, runs, shots / "mlflow-compare.png")
