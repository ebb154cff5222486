"""The fault scenarios, long: real daemons, real faults, the JSON report on stdout.

The same scenarios as tests/faults (the CI runs them for seconds), for minutes:

    .venv/bin/python bench/faults.py --scenario kill9 --minutes 5
    .venv/bin/python bench/faults.py --scenario kill9 --minutes 2 --storm 20   # 40 steps/s
    .venv/bin/python bench/faults.py --scenario sigterm --minutes 3
    .venv/bin/python bench/faults.py --scenario three_daemons --minutes 5
    .venv/bin/python bench/faults.py --scenario pg_restart --minutes 3 --cluster 15/main
    .venv/bin/python bench/faults.py --scenario clock_jump --minutes 3

PostgreSQL scenarios create (and drop) a database of their own on
`TRIGGERS_TEST_PG_URL` (default postgresql+psycopg://postgres@127.0.0.1:5432/test).
`pg_restart` restarts that whole server with `pg_ctlcluster`: only on a server you
may restart. `clock_jump` needs libfaketime (`make faketime`).

`--headline` prints the flat figures docs/reliability.md quotes instead of the
whole report; `--out FILE` writes the whole report there as well. The exit code is
1 when an invariant broke, so a long run can gate a release.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.faults import scenarios
from tests.faults.report import headline


def params(args: argparse.Namespace) -> dict[str, Any]:
    """Scenario arguments for a run of `--minutes` (the fault window; settling comes after)."""
    seconds = args.minutes * 60
    given: dict[str, Any] = {"keep": args.keep}
    if args.seed is not None and args.scenario in {"kill9", "sigterm", "three_daemons"}:
        given["seed"] = args.seed
    if args.scenario == "kill9":
        given.update(
            seconds=seconds,
            backend=args.backend,
            burst=args.burst,
            storm=args.storm,
            settle_s=args.settle,
        )
    elif args.scenario == "three_daemons":
        given.update(seconds=seconds, settle_s=args.settle)
    elif args.scenario == "sigterm":
        step_s = args.step
        # One SIGTERM per step length and a half, each inside a long step.
        given.update(
            seconds=seconds,
            step_s=step_s,
            terms=max(1, int(seconds // (step_s * 1.5))),
            backend=args.backend,
            settle_s=args.settle,
        )
    elif args.scenario == "pg_restart":
        given.update(
            seconds=seconds,
            restarts=args.restarts,
            cluster=args.cluster,
            settle_s=args.settle,
        )
    elif args.scenario == "clock_jump":
        # A cycle: hold, jump forward past the grace, hold, jump back, wait past it.
        cycle_s = 2 * 4 + args.back + 6
        given.update(
            forward_s=args.forward,
            back_s=args.back,
            cycles=max(1, int(seconds // cycle_s)),
            backend=args.backend,
            settle_s=args.settle,
        )
    return given


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", required=True, choices=sorted(scenarios.SCENARIOS))
    parser.add_argument("--minutes", type=float, default=3.0, help="fault window")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--settle", type=float, default=20.0, help="settling bound, seconds")
    parser.add_argument("--burst", type=int, default=3, help="kill9: extra every-second triggers")
    parser.add_argument(
        "--storm",
        type=int,
        default=0,
        help="kill9: that many every-second triggers of two command steps each, instead",
    )
    parser.add_argument("--step", type=float, default=22.0, help="sigterm: long step, seconds")
    parser.add_argument("--restarts", type=int, default=3, help="pg_restart: server restarts")
    parser.add_argument("--cluster", default="15/main", help="pg_restart: VERSION/NAME")
    parser.add_argument("--forward", type=float, default=90.0, help="clock_jump: seconds")
    parser.add_argument("--back", type=float, default=20.0, help="clock_jump: seconds")
    parser.add_argument("--headline", action="store_true", help="print the flat figures only")
    parser.add_argument("--out", type=Path, help="also write the whole report here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    report = scenarios.SCENARIOS[args.scenario](**params(args))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    shown = {**headline(report), "violations": report["violations"]} if args.headline else report
    print(json.dumps(shown, indent=2))
    return 1 if report["violations"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
