"""The curriculum as a Kubeflow Pipelines v2 pipeline (``parathink kfp compile | run --local | submit``).

Each stage is a lightweight component whose body runs ``parathink stage NAME`` in a subprocess; a stage that the
cluster profile puts on several nodes runs as a Kubeflow Trainer v2 ``TrainJob`` instead. Nothing here trains,
grades or decides what is up to date: placement comes from :mod:`parathink.placement.cluster`, freshness from the run
directory's manifests. ``docs/kubeflow.md`` is the user's guide; ``components/README.md`` the component catalogue.

Modules, each with one job: ``plan`` (the overrides validated, the run's stages and placements), ``components`` (the
component of each stage), ``tasks`` (a placement applied to a KFP task through kfp-kubernetes), ``pipeline`` (the
stages chained and compiled), ``manifests`` (the Pod and TrainJob of a stage as plain dicts), ``launch`` (create a
TrainJob and wait for it), ``local`` (``kfp.local``), ``submit`` (``kfp.Client``), ``cli``. Only ``components``,
``tasks``, ``pipeline``, ``local`` and ``submit`` import kfp.
"""
