"""The run directory, a low layer every loop may use: where a stage's outputs, records and bookkeeping live.

``folder`` (``RunDir``: the run's folder, local or on S3, its inputs and publication), ``manifest`` (what each
stage published, with hashes), ``timings`` (``_timings.json``: steps, results, durations), ``lock`` (one writer per
stage), ``cache`` (the stage cache keyed by config and inputs), ``confine`` (paths kept inside the run) and
``provenance`` (what produced a file). Nothing here imports the stages or the pipeline that chains them: the
training loops and the tracking write through this layer and stay below the runner.
"""
