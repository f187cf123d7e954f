"""What the parathink DAGs are built from (``dags/parathink_curriculum.py``, ``dags/parathink_nightly.py``).

The DAG processor skips this package (``dags/.airflowignore``); the DAG files import it. Modules:

- ``chain``: the fixed chain of stage tasks and which task runs which stage of a run (pure);
- ``form``: the trigger form's values turned into ``parathink`` arguments, checked (pure);
- ``local``: one ``parathink`` call as a subprocess, its output streamed into the task log (pure);
- ``pods``: one stage as a ``KubernetesPodOperator`` pod from a placement, and the plan's pod where the worker has
  no ``parathink`` (``tools/stage_pod.py`` runs both from a shell);
- ``tasks``: the tasks themselves (plan, one per stage, kubeflow, promote) and the retry policy;
- ``factory``: the DAG built from them;
- ``compat``: the oldest Airflow they parse on (3.3, checked here at import) and who may run them (pure);

``make airflow``'s launcher (api-server, scheduler, dag-processor on 127.0.0.1) is ``tools/local_airflow.py``: this
folder ships into the scheduler's DAG folder, so developer tools live outside it.

"Pure" modules import neither Airflow nor parathink, so the main test venv checks them directly. No module here
imports torch, transformers or parathink: every stage runs as the ``parathink`` command.
"""

from parathink_airflow.compat import require_airflow

try:
    import airflow as _airflow
except ImportError:  # the pure modules are imported without Airflow (the main test venv)
    _airflow = None
if _airflow is not None and hasattr(_airflow, "__version__"):
    require_airflow(_airflow.__version__)  # one line on an Airflow < 3.3, not an ImportError deep in its SDK
