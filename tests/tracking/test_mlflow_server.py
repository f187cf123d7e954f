"""Against a real ``mlflow server`` on 127.0.0.1 (``mlflow_server`` in tests/conftest.py) whose artifacts live on
S3 (moto's server): the curriculum's runs, metrics, models and plots go through HTTP and land in the bucket."""

import pytest
from mlflow.tracking import MlflowClient

from parathink import storage
from parathink.pipeline import runner


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
