"""``python -m dqnlab.ui``: the MLflow UI on a results folder (:mod:`dqnlab.tracking.ui`)."""

import sys

from dqnlab.tracking.ui import main

if __name__ == "__main__":
    sys.exit(main())
