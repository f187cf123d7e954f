"""What the parathink DAGs are built from (``dags/parathink_curriculum.py``, ``dags/parathink_nightly.py``).

The DAG processor skips this package (``dags/.airflowignore``); the DAG files import it. Modules:

- ``chain``: the fixed chain of stage tasks and which task runs which stage of a run (pure);
- ``form``: the trigger form's values turned into ``parathink`` arguments, checked (pure);
- ``local``: one ``parathink`` call as a subprocess, its output streamed into the task log (pure);
- ``pods``: one stage as a ``KubernetesPodOperator`` pod from a placement, and a command line for it;
- ``tasks``: the tasks themselves (plan, one per stage, kubeflow, promote) and the retry policy;
- ``factory``: the DAG built from them;
- ``local_airflow``: ``make airflow`` and the tests' Airflow: api-server, scheduler, dag-processor on 127.0.0.1.

"Pure" modules import neither Airflow nor parathink, so the main test venv checks them directly. No module here
imports torch, transformers or parathink: every stage runs as the ``parathink`` command.
"""
