"""Shared services for a study that spans processes and machines: PostgreSQL (one database for
Optuna, one for MLflow), ``mlflow server`` on it with proxied artifacts, and optuna-dashboard.

    python -m dqnlab.services up --root results/services        # start all three, print the URIs
    python -m dqnlab.services env --root results/services       # the URIs as shell exports
    python -m dqnlab.services down --root results/services      # stop all three (data is kept)

Everything lives under ``--root``: the PostgreSQL data folder (``pg/``), the artifact store
(``mlartifacts/``), the logs, and ``services.json`` (ports, pids, the generated database password;
mode 0600). ``up`` on a root that was stopped starts the same cluster again with its data.

By default every service binds 127.0.0.1. For other machines, pass ``--host 0.0.0.0`` (or the
machine's address): PostgreSQL then accepts password logins from its own subnets (``samenet`` in
pg_hba.conf) and the MLflow server needs ``--allowed-hosts`` (Host headers it answers, e.g.
``10.0.0.5:5000``) and, for browsers on other origins, ``--cors-allowed-origins``.

PostgreSQL refuses to run as root: as root, the server runs as the ``postgres`` user that Debian's
package creates, which must be able to reach ``--root`` (e.g. a folder under /tmp or /srv).
The driver is psycopg2 (``pip install -e '.[cluster]'`` installs psycopg2-binary), so storage
URIs read ``postgresql+psycopg2://user:password@host:port/db``.

Modules: ``state`` (services.json), ``postgres``, ``processes`` (start, wait, stop), ``cluster``
(up/down), ``__main__`` (the command line).
"""
