# Airflow 3 for the curriculum DAGs (dags/, docs/airflow.md): its own venv, a local Airflow + MLflow UI for users,
# and Chromium for the UI test.
# Airflow lives apart from .venv: beside kfp's exact pins (kubernetes<31, requests==2.33.0, protobuf<7) the resolver
# takes minutes and settles on an old cncf-kubernetes provider; alone, uv resolves it in seconds. The DAG tasks run
# the project's `parathink` (.venv/bin) as a subprocess, so neither venv imports the other.

AIRFLOW_VENV     := .venv-airflow
AIRFLOW_VERSION  ?= 3.3.2
AIRFLOW_K8S_PROVIDER ?= 10.25.0
# Remote task logs in S3 (helm/airflow-values.yaml's logging; tests/e2e/test_dag_on_cluster.py reads them back).
AIRFLOW_AMAZON_PROVIDER ?= 9.39.0
AIRFLOW_PY       := $(AIRFLOW_VENV)/bin/python
AIRFLOW_STAMP    := $(AIRFLOW_VENV)/.installed-$(AIRFLOW_VERSION)-$(AIRFLOW_K8S_PROVIDER)-$(AIRFLOW_AMAZON_PROVIDER)
AIRFLOW_HOME_DIR ?= $(CURDIR)/.airflow
AIRFLOW_PORT     ?= 8080
MLFLOW_UI_PORT   ?= 5000

.PHONY: airflow-venv airflow airflow-stop chromium

airflow-venv: $(AIRFLOW_STAMP)

# The stamp names both versions: a new pin rebuilds the venv, an edit of this file's comments does not.
# uv comes from .venv (the project's venv is built first anyway: the tests run there).
$(AIRFLOW_STAMP): constraints/airflow.txt | $(STAMP)
	test -x $(AIRFLOW_PY) || $(PYTHON) -m venv $(AIRFLOW_VENV)
	$(VENV)/bin/uv pip install -q --python $(AIRFLOW_PY) -c constraints/airflow.txt apache-airflow==$(AIRFLOW_VERSION) \
		apache-airflow-providers-cncf-kubernetes==$(AIRFLOW_K8S_PROVIDER) \
		apache-airflow-providers-amazon==$(AIRFLOW_AMAZON_PROVIDER)
	$(AIRFLOW_PY) -c "import airflow, airflow.providers.cncf.kubernetes as k, airflow.providers.amazon as a; print('airflow', airflow.__version__, '| cncf-kubernetes', k.__version__, '| amazon', a.__version__)"
	touch $(AIRFLOW_STAMP)

# Debian's Chromium and its chromedriver for the UI test (selenium uses the system driver and downloads nothing).
# Installed only when missing and when running as root; elsewhere the browser test says why it skips (under CI=true
# it fails instead).
chromium:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		$(call APT_INSTALL,chromium chromium-driver) && chromium --version; \
	else echo "chromium: not installed and not root; the Airflow UI test will skip (apt-get install chromium chromium-driver)"; fi

# A local Airflow (api-server, scheduler, dag-processor; LocalExecutor, sqlite, all on 127.0.0.1) over dags/, and an
# MLflow UI over the tracking store the DAG runs write (the same mlflow.db as `make demo`). Stop with `make airflow-stop`.
airflow: $(STAMP) $(AIRFLOW_STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(AIRFLOW_PY) tools/local_airflow.py start \
		--home $(AIRFLOW_HOME_DIR) --port $(AIRFLOW_PORT) --mlflow-port $(MLFLOW_UI_PORT) \
		--mlflow-bin $(CURDIR)/$(VENV)/bin/mlflow --tracking-uri sqlite:///$(CURDIR)/mlflow.db --workdir $(CURDIR)

airflow-stop:
	$(PYTHON) tools/local_airflow.py stop --home $(AIRFLOW_HOME_DIR)

TEST_DEPS += airflow-venv chromium
