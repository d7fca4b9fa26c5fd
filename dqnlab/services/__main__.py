"""``python -m dqnlab.services up|down|status|env --root DIR`` (see :mod:`dqnlab.services`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import dqnlab.services
from dqnlab.services.cluster import describe, down, exports, up
from dqnlab.services.processes import alive
from dqnlab.services.state import STATE_FILE, ServiceError, ServicesState, load_state


def parse_networks(text: str) -> list[str]:
    """``--allow-from`` as normalised CIDRs; ServiceError naming the flag for anything else."""
    import ipaddress

    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        try:
            out.append(str(ipaddress.ip_network(part, strict=False)))
        except ValueError:
            raise ServiceError(f"--allow-from: got {part!r}; allowed: networks in CIDR form, e.g. 10.0.0.0/24,"
                               "192.168.1.7/32") from None  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dqnlab.services", description=dqnlab.services.__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("up", "down", "status", "env"):
        s = sub.add_parser(name)
        s.add_argument("--root", default="results/services", help="folder for data, logs and services.json")
    u = sub.choices["up"]
    u.add_argument("--host", default="127.0.0.1", help="bind address of all services (0.0.0.0: every interface)")
    u.add_argument("--pg-port", type=int, default=5433)
    u.add_argument("--mlflow-port", type=int, default=5000)
    u.add_argument("--dashboard-port", type=int, default=8080)
    u.add_argument("--allowed-hosts", help="mlflow server --allowed-hosts (needed when other machines connect)")
    u.add_argument("--cors-allowed-origins", help="mlflow server --cors-allowed-origins")
    u.add_argument("--no-dashboard", action="store_true", help="do not start optuna-dashboard")
    u.add_argument("--allow-from", default="", metavar="CIDR[,CIDR]",
                   help="networks besides this machine whose PostgreSQL logins are accepted (default: none)")
    u.add_argument("--tls", action="store_true", help="PostgreSQL offers TLS (self-signed) and requires it off this machine")
    u.add_argument("--pg-bin", help="folder with initdb and pg_ctl (default: found)")
    args = p.parse_args(argv)
    root = Path(args.root).expanduser().resolve()
    try:
        if args.command == "up":
            for flag in ("pg_port", "mlflow_port", "dashboard_port"):
                if not 1 <= getattr(args, flag) <= 65535:
                    raise ServiceError(f"--{flag.replace('_', '-')}: got {getattr(args, flag)}; allowed: 1..65535")
            state = ServicesState(
                str(root), args.host, args.pg_port, args.mlflow_port, args.dashboard_port, pg_bin=args.pg_bin or "",
                allowed_hosts=args.allowed_hosts, cors_allowed_origins=args.cors_allowed_origins,
                dashboard=not args.no_dashboard, allow_from=parse_networks(args.allow_from), tls=args.tls,
            )  # fmt: skip
            up(state)
            print(describe(state))
            return 0
        state = load_state(root)
        if state is None:
            raise ServiceError(f"no services under {root} (no {STATE_FILE}); start them with: "
                               f"python -m dqnlab.services up --root {root}")  # fmt: skip
        if args.command == "down":
            down(state)
            print(f"stopped; data kept under {root}")
        elif args.command == "env":
            print(exports(state))
        else:
            running = {n: pid for n, pid in state.pids.items() if alive(pid)}
            print(describe(state))
            print(f"running: {running or 'nothing'}")
        return 0
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
