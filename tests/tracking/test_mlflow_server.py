"""Against a real ``mlflow server`` on 127.0.0.1 (started and stopped here) whose artifacts live on S3
(moto's server): the curriculum's runs, metrics, models and plots go through HTTP and land in the bucket."""

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from mlflow.tracking import MlflowClient

from parathink import storage
from parathink.stages import runner
from parathink.storage.testing import free_port, moto_s3


@pytest.fixture
def mlflow_server(tmp_path):
    with moto_s3("mlflow"):
        port = free_port()
        mlflow_bin = str(Path(sys.executable).with_name("mlflow"))
        cmd = [mlflow_bin, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
               "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
               "--artifacts-destination", "s3://mlflow/artifacts"]
        log = open(tmp_path / "server.log", "w")
        # No background job runner (huey): the curriculum does not use MLflow server jobs.
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.time() + 240  # two mlflow imports; slow when the CPU is shared
            while True:
                try:
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("mlflow server did not start:\n" + (tmp_path / "server.log").read_text()[-3000:])
                time.sleep(0.5)
            yield url
        finally:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
            log.close()


@pytest.mark.slow
def test_curriculum_against_server_with_s3_artifacts(curriculum, mlflow_server):
    ovr = curriculum.overrides("tracking=server", f"tracking.uri={mlflow_server}",
                               stages=("prep", "train", "tune", "eval"))
    assert runner.main_run(ovr) == 0
    client = MlflowClient(tracking_uri=mlflow_server)
    versions = {v.tags["stage"]: v for v in client.search_model_versions("name='parathink-tiny'")}
    assert set(versions) == {"train", "tune"}
    keys = storage.list_files("s3://mlflow/artifacts")
    assert any(k.endswith("model/weights.bin") for k in keys), keys[:20]
    assert any(k.endswith("plots/figure3_rl_curves.png") for k in keys)
    assert client.get_model_version_by_alias("parathink-tiny", "candidate").version == versions["tune"].version
