"""Where a run's numbers go: ``callbacks`` (the engine's callback interface), ``console`` (the
progress line), ``mlflow_runs`` (the MLflow tracker: one parent run per study, one child run per
seed, chart sections from :mod:`dqnlab.metrics`), ``ui`` (the MLflow UI the way a study needs it)."""
