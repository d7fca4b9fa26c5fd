"""The MLflow UI the way a study needs it: ``python -m dqnlab.ui`` (docs/sweeps.md: "Browse the results").

MLflow 3.17's UI decides in the browser, not from the experiment, whether it shows classic runs or
GenAI traces: a global "workflow" stored in the browser's localStorage (``mlflow.workflowType_v1``,
default GenAI; mlflow PR #20161), so a fresh browser opens every experiment in the GenAI view (trace
overview, "Detect issues", the assistant panel). Its telemetry notice is likewise a localStorage flag,
shown even when the server sends no telemetry. So:

- :func:`create_app` (the ``mlflow.app`` entry point ``dqnlab``: ``mlflow server --app-name dqnlab``)
  is MLflow's own server with one addition: the page it serves sets those browser defaults before the
  UI starts, unless the user already chose otherwise (:data:`UI_DEFAULTS`: the classic workflow, the
  telemetry notice read, the assistant not opened by itself). The server itself runs with
  ``MLFLOW_DISABLE_TELEMETRY=true``, so the notice is true: the UI sends nothing.
- A study's runs open in a saved view that the sweep writes on its experiment
  (:func:`save_study_view`): that study's seed runs as a flat list, the swept axes and the key results
  as columns, best first; :func:`study_url` is its link, printed by every sweep and by ``python -m
  dqnlab.ui``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

UI_DEFAULTS = {
    "mlflow.workflowType_v1": json.dumps("machine_learning"),
    "mlflow.telemetry.info.alert.dismissed_v1": "true",
    "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": "true",
    "mlflow.assistant.panelOpen_v1": "false",
    "mlflow.detectIssues.guidanceShown_v1": "true",
}
"""localStorage keys MLflow 3.17's UI reads (values as it stores them), set only where absent."""

VIEW_TAG_PREFIX = "mlflow.sharedViewState."
KEY_METRICS = ("eval/objective", "eval/eval_return_mean", "eval/eval_return_best", "eval/train_return_last100",
               "stability/soft_divergence", "throughput/utd_realised")  # fmt: skip
"""The results a study's view shows beside its swept axes."""


def defaults_script() -> str:
    pairs = json.dumps(UI_DEFAULTS)
    return (f"<script>(function(){{var d={pairs};for(var k in d){{try{{if(localStorage.getItem(k)===null)"
            f"localStorage.setItem(k,d[k]);}}catch(e){{}}}}}})();</script>")  # fmt: skip


def inject_defaults(html: bytes) -> bytes:
    """The UI's page with :func:`defaults_script` as the first thing in its ``<head>``."""
    return html.replace(b"<head>", b"<head>" + defaults_script().encode(), 1)


def _add_defaults_hook(flask_app) -> None:
    if getattr(flask_app, "_dqnlab_defaults", False):
        return

    def hook(response):
        if response.mimetype == "text/html" and response.status_code == 200:
            response.direct_passthrough = False  # a file response: read it whole (the page is 1 kB)
            response.set_data(inject_defaults(response.get_data()))
        return response

    flask_app.after_request(hook)
    flask_app._dqnlab_defaults = True


def create_app(app=None):
    """MLflow's server app with the browser defaults added to its page (see the module docstring)."""
    from mlflow.server import app as flask_app

    app = app or flask_app
    _add_defaults_hook(app)
    if os.environ.get("_MLFLOW_SGI_NAME") == "uvicorn":  # what `mlflow server` runs by default
        from mlflow.server.fastapi_app import create_fastapi_app

        return create_fastapi_app(app)
    return app


# --- the study's saved view -------------------------------------------------------------------------
def view_key(study: str) -> str:
    """The saved view's key: the study name in the characters a URL and a tag key keep as they are."""
    return "dqnlab-" + "".join(c if c.isalnum() or c in "-_." else "-" for c in study)


def study_view_state(study: str, axes: list[str]) -> dict[str, Any]:
    """The runs-table state of a study: its seed runs (flat: a filter un-nests them), the swept axes and
    :data:`KEY_METRICS` as columns, the best objective first."""
    columns = [f"params.`{a}`" for a in axes] + ["params.`seed`", "tags.`status`"]
    columns += [f"metrics.`{m}`" for m in KEY_METRICS]
    return {"searchFilter": f"tags.`dqnlab.study` = '{study}' and tags.`dqnlab.role` = 'trial'",
            "orderByKey": "metrics.`eval/objective`", "orderByAsc": False, "selectedColumns": columns}  # fmt: skip


def save_study_view(client, experiment_id: str, study: str, axes: list[str]) -> None:
    """Write the study's view on its experiment (MLflow's shared-view tag), read by :func:`study_url`'s link."""
    now = int(time.time() * 1000)
    envelope = {"name": study, "createdAt": now, "updatedAt": now, "state": json.dumps(study_view_state(study, axes))}
    client.set_experiment_tag(experiment_id, VIEW_TAG_PREFIX + view_key(study), json.dumps(envelope))


def study_url(ui: str, experiment_id: str, study: str) -> str:
    """The link that opens the study's view in the classic runs page of the UI at ``ui``."""
    query = urllib.parse.urlencode({"viewStateShareKey": view_key(study), "workflowType": "machine_learning"})
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def home_url(ui: str) -> str:
    return f"{ui.rstrip('/')}/#/?workflowType=machine_learning"


# --- python -m dqnlab.ui -----------------------------------------------------------------------------
def server_command(tracking_uri: str, host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri, "--host", host, "--port",
            str(port), "--app-name", "dqnlab", "--workers", "1"]  # fmt: skip


def server_env() -> dict[str, str]:
    """Telemetry off; MLflow's GenAI job runner off (of no use to a study, and it leaves a folder in
    /dev/shm behind at every start)."""
    return {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true",
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dqnlab.ui", description="The MLflow UI on a results folder, "
                                "opening studies in their saved views")  # fmt: skip
    p.add_argument("--results", default="results", help="the results folder (its mlflow.db)")
    p.add_argument("--tracking-uri", default=None, help="default: sqlite:///<results>/mlflow.db")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5000)
    args = p.parse_args(argv)
    uri = args.tracking_uri or f"sqlite:///{Path(args.results).resolve() / 'mlflow.db'}"
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        print(f"error: --results: no MLflow database at {uri.removeprefix('sqlite:///')}; run a sweep first",
              file=sys.stderr)  # fmt: skip
        return 2
    ui = f"http://{args.host}:{args.port}"
    print(f"MLflow UI: {home_url(ui)}")
    for experiment_id, study in studies(uri):
        print(f"  {study}: {study_url(ui, experiment_id, study)}")
    return serve(server_command(uri, args.host, args.port))


def serve(cmd: list[str]) -> int:
    """Run the server in its own process group until it exits or this process gets Ctrl-C or SIGTERM;
    then stop the whole group (``mlflow server`` runs uvicorn as a child of its own)."""
    from dqnlab.signals import interrupts_recorded

    proc = subprocess.Popen(cmd, env=server_env(), start_new_session=True)
    try:
        with interrupts_recorded():
            return proc.wait()
    except KeyboardInterrupt:
        return 130
    finally:
        stop_server_group(proc)


def stop_server_group(proc: subprocess.Popen) -> None:
    """SIGTERM the server's whole process group, SIGKILL what is left after 15 s. The group is stopped even
    when its leader exited first: ``mlflow server``'s uvicorn child would live on and keep the port."""
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:  # nothing left in the group
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            proc.poll()  # reap the leader, which is our child
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def studies(tracking_uri: str) -> list[tuple[str, str]]:
    """``(experiment_id, study)`` of every study with a saved view at ``tracking_uri``."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    out = []
    for exp in client.search_experiments():
        for tag, value in exp.tags.items():
            if tag.startswith(VIEW_TAG_PREFIX + "dqnlab-"):
                out.append((exp.experiment_id, json.loads(value).get("name", tag)))
    return out
