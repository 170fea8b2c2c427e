"""`ascend-hybrid demo`: the example jobs on the simulated cluster (demo.py), or with `--kueue` two teams' jobs
against one Kueue quota (kueue_demo.py, which builds on demo.py's steps)."""

from __future__ import annotations

from ascend_hybrid.devcluster import cluster as devcluster


def run(args) -> int:
    if args.kueue:
        from ascend_hybrid.devtools import kueue_demo

        return kueue_demo.run(args)
    from ascend_hybrid.devtools import demo

    return demo.run_demo(args)


def register(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="simulated cluster + operator + the example jobs, shown Running")
    parser.add_argument("--name", default=devcluster.DEFAULT_NAME)
    parser.add_argument("--kueue", action="store_true",
                        help="instead: two teams' jobs against one Kueue quota (devtools/kueue_demo.py)")
    parser.set_defaults(func=run)
