"""Studies (sweeps): a grid of configurations run by Optuna, one MLflow child run per seed (per replica).

``spec`` (what a study runs), ``storage`` (where it lives, its locks), ``queue`` (the grid in
Optuna), ``claims`` (at most one live trial per grid point), ``runner`` (popping and running trials,
each in a fresh thread-free process; the study's parent run), ``cli`` (what ``sweeps/*.py`` share).
"""
