"""Where each stage runs and what it needs there: the cluster profile's placements (``cluster``), the pods they
become (``podspec``) and the memory each stage's process takes on its device (``memory_model``). It reads the
config and what a stage declares of itself (``StageRole``, passed in by the pipeline), never the stages package.
"""
