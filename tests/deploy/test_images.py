"""images/: the Dockerfiles lint clean (hadolint), keep their build toolchain out of the final stage and run as a
non-root user; and the orchestrator's `parathink plan` venv (the wheel without its dependencies, plus plan's two) in
a clean venv, outside the checkout, so that an import that needs torch or the source tree fails here and not in a
pod. The trainer's install steps are not repeated in a venv here: `make images` builds the CPU trainer from the same
requirements file and wheel, and tests/e2e runs its stages in pods, outside any checkout."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
DOCKERFILES = sorted(IMAGES.glob("*/Dockerfile"))
VENV_BIN = Path(sys.executable).parent
AIRFLOW_PY = ROOT / ".venv-airflow" / "bin" / "python"


def stages(dockerfile: Path) -> list[str]:
    """The Dockerfile's build stages, each as its text from FROM up to the next FROM."""
    text = dockerfile.read_text()
    starts = [m.start() for m in re.finditer(r"^FROM ", text, re.M)]
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def run(argv: list, cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "CI": "true", **(env or {})})
    output = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{output}"
    return proc


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint_finds_nothing(dockerfile):
    proc = subprocess.run([VENV_BIN / "hadolint", "--no-color", dockerfile], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_final_stage_is_pinned_non_root_and_holds_no_secret(dockerfile):
    text = dockerfile.read_text()
    final = stages(dockerfile)[-1]
    assert len(stages(dockerfile)) >= 2, "multi-stage: the build steps stay out of the final image"
    users = re.findall(r"^USER (\S+)", final, re.M)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    for image in re.findall(r"^FROM (\S+)", text, re.M):
        resolved = re.sub(r"\$\{(\w+)\}", lambda m: re.search(rf"ARG {m[1]}=(\S+)", text)[1], image)
        assert ":" in resolved and not resolved.endswith(":latest"), f"{dockerfile}: base image {image} not pinned"
    assert not re.search(r"(SECRET|TOKEN|PASSWORD|ACCESS_KEY)\w*=", text), "credentials come from Secrets at run time"


def test_trainer_builds_nothing_in_its_final_stage():
    """The CUDA trainer starts from the CPU trainer's Python base (torch's PyPI wheel brings CUDA and NCCL): no NVIDIA
    base or toolkit, nothing compiled. Its final stage installs its two venvs in place (copying 17 GB of venvs in
    from other stages doubles them in the build's store), from wheels only, then the wheel alone, without resolving."""
    text = (IMAGES / "trainer" / "Dockerfile").read_text()
    assert set(re.findall(r"^FROM (\S+)", text, re.M)) == {"${PYTHON_IMAGE}"}
    assert "nvidia/cuda" not in text and "flash-attn" not in text and "nvcc" not in text
    final = stages(IMAGES / "trainer" / "Dockerfile")[-1]
    assert not re.search(r"apt-get|build-essential|gcc|--no-binary", final), "no toolchain, no source build"
    installs = re.findall(r"pip install[^\n]*", final)
    assert installs[-1] == "pip install --no-cache-dir --no-deps /tmp/wheels/parathink-*.whl && rm -rf /tmp/wheels /req"
    assert any("-r /req/requirements-vllm.txt" in i for i in installs) and "COPY --from=vllm" not in final
    assert 'ENTRYPOINT ["parathink"]' in final and "USER 1000:1000" in final


# The CUDA major of PyPI's Linux wheel of each torch release the trainer image has pinned, and the oldest NVIDIA driver
# that runs it (NVIDIA's CUDA compatibility table). A new torch pin fails here until its row is added and docs/deploy.md
# states the same driver floor.
TORCH_CUDA = {"2.13.0": (13, 580)}


def test_the_trainer_images_torch_cuda_and_driver_floor_are_what_the_docs_state():
    pin = next(line.split("==")[1] for line in (IMAGES / "trainer" / "requirements.txt").read_text().splitlines()
               if line.startswith("torch=="))
    assert pin in TORCH_CUDA, f"torch=={pin}: add its CUDA major and driver floor to TORCH_CUDA"
    major, driver = TORCH_CUDA[pin]
    docs = (ROOT / "docs" / "deploy.md").read_text()
    assert f"CUDA {major} build" in docs and f"driver >= {driver}" in docs, (major, driver)
    assert f"driver (>= {driver}" in (IMAGES / "trainer" / "Dockerfile").read_text() or \
        f">= {driver}" in (IMAGES / "trainer" / "Dockerfile").read_text()


def test_requirements_are_pinned_and_match_what_the_tests_run():
    for req in IMAGES.glob("*/requirements*.txt"):
        for line in req.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                assert re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[A-Za-z0-9_.+]+", line.strip()), f"{req}: {line}"
    airflow_mk = (ROOT / "mk" / "airflow.mk").read_text()
    pins = dict(line.split("==") for line in (IMAGES / "orchestrator" / "requirements.txt").read_text().split()
                if "==" in line)
    assert f"AIRFLOW_VERSION  ?= {pins['apache-airflow']}" in airflow_mk
    assert f"AIRFLOW_K8S_PROVIDER ?= {pins['apache-airflow-providers-cncf-kubernetes']}" in airflow_mk
    assert f"AIRFLOW_AMAZON_PROVIDER ?= {pins['apache-airflow-providers-amazon']}" in airflow_mk  # remote logs
    assert f"apache/airflow:{pins['apache-airflow']}-python" in (IMAGES / "orchestrator" / "Dockerfile").read_text()
    from importlib.metadata import version
    mlflow_reqs = (IMAGES / "mlflow" / "requirements.txt").read_text().split()
    mlflow_pin = next(p for p in mlflow_reqs if p.startswith("mlflow=="))
    assert mlflow_pin == f"mlflow=={version('mlflow')}"  # the server image runs the MLflow the tests run
    trainer = (IMAGES / "trainer" / "requirements.txt").read_text().split()
    assert f"kfp=={version('kfp')}" in trainer  # the components' executor is the KFP the pipeline compiles with


def test_dockerignore_keeps_runs_and_venvs_out_and_what_copy_needs_in():
    ignored = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and line[0] != "#"]
    for must in (".venv", ".venv-*", "runs", "mlruns", "bench-results", ".git", "**/__pycache__"):
        assert must in ignored
    for dockerfile in DOCKERFILES:
        for sources in re.findall(r"^COPY (?!--from)(?:--\S+ )*(.+) \S+$", dockerfile.read_text(), re.M):
            for src in sources.split():
                top = src.split("/")[0]
                assert list(ROOT.glob(src.rstrip("/"))), f"{dockerfile}: COPY {src} matches nothing"
                assert top not in ignored, f"{dockerfile}: COPY {src} but .dockerignore drops {top}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """parathink's wheel, built from the checkout as the images' first stage builds it."""
    out = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", out, ROOT], ROOT)
    (whl,) = out.glob("parathink-*.whl")
    return whl


def clean_venv(path: Path) -> Path:
    """A venv of the machine's python3 with nothing installed (not a copy of the test venv)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    run([shutil.which("python3"), "-m", "venv", path], path.parent)
    return path / "bin" / "python"


@pytest.fixture(scope="module")
def plan_venv(wheel, tmp_path_factory) -> Path:
    """images/orchestrator/Dockerfile's parathink venv: the wheel without its dependencies, plus plan's two."""
    py = clean_venv(tmp_path_factory.mktemp("plan") / "venv")
    run([VENV_BIN / "uv", "pip", "install", "-q", "--python", py, "--no-deps", wheel], py.parent)
    requirements = IMAGES / "orchestrator" / "requirements-plan.txt"
    run([VENV_BIN / "uv", "pip", "install", "-q", "--python", py, "-r", requirements], py.parent)
    return py


# Validating the training stages reads only their torch-free configs (parathink.config.rl, .sft_config),
# so the orchestrator image, which has no torch, plans a whole GPU experiment.
LIGHT_STAGES = "stages=[teacher,filter,eval,promote]"


@pytest.mark.parametrize("stages", [LIGHT_STAGES, "stages=[teacher,filter,sft,rl_easy,rl_hard,eval]"],
                         ids=["without-training-stages", "whole-curriculum"])
def test_orchestrator_plans_without_torch(plan_venv, tmp_path, stages):
    proc = run([plan_venv.with_name("parathink"), "plan", "experiment=parallel_r1_seen", stages], tmp_path)
    doc = json.loads(proc.stdout)
    assert doc["placement"]["teacher"]["gpus_per_node"] == 8 and doc["placement"]["filter"]["gpu"] is False
    assert subprocess.run([plan_venv, "-c", "import torch"], capture_output=True).returncode != 0


def image_env(dockerfile: Path, prefix: Path) -> dict[str, str]:
    """The Dockerfile's ENV values, with its absolute paths moved under ``prefix`` (where the test lays them out)."""
    text = dockerfile.read_text().replace("\\\n", " ")
    pairs = [p for line in re.findall(r"^ENV (.+)$", text, re.M) for p in line.split()]
    return {k: (str(prefix) + v if v.startswith("/opt/") else v) for k, v in (p.split("=", 1) for p in pairs)}


def test_orchestrator_dags_plan_from_the_image_layout(plan_venv, tmp_path):
    """The DAG folder as the image holds it (a copy, no checkout around it) lists the wheel's experiments in its
    trigger form and calls the image's `parathink plan`, with the image's environment."""
    if not AIRFLOW_PY.exists():
        pytest.fail("no Airflow venv: run `make airflow-venv`")
    prefix = tmp_path / "image"
    dags = shutil.copytree(ROOT / "dags", prefix / "opt" / "airflow" / "dags")
    shutil.copytree(plan_venv.parents[1], prefix / "opt" / "parathink", symlinks=True)
    env = {**image_env(IMAGES / "orchestrator" / "Dockerfile", prefix), "PATH": "/usr/bin:/bin"}
    env["PARATHINK_WORKDIR"] = str(tmp_path)
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from parathink_airflow import local, params; "
            f"print(json.dumps([params.experiments(), local.plan(['experiment=parallel_r1_seen', '{LIGHT_STAGES}'])]))")
    names, doc = json.loads(run([AIRFLOW_PY, "-c", code, dags], tmp_path, env).stdout.strip().splitlines()[-1])
    assert "parallel_r1_seen" in names and "tiny" in names
    assert doc["placement"]["teacher"]["node_selector"] == {"parathink.io/pool": "gpu"}


@pytest.mark.parametrize("name", ["trainer", "trainer-cpu", "orchestrator"])
def test_the_images_that_run_parathink_bake_what_they_were_built_from(name):
    """images/build.sh passes its inputs key as PARATHINK_BUILD_INPUTS; an image that drops the ARG/ENV pair would
    leave its pods' lineage and the nightly's code identity without it (and podman warns only)."""
    final = stages(IMAGES / name / "Dockerfile")[-1]
    assert 'ARG PARATHINK_BUILD_INPUTS=""' in final and "ENV PARATHINK_BUILD_INPUTS=${PARATHINK_BUILD_INPUTS}" in final
    assert '--build-arg "PARATHINK_BUILD_INPUTS=sha256:$key"' in (IMAGES / "build.sh").read_text()
