"""`python -m ascend_hybrid.devcluster up|down|…` — the dev-cluster CLI without the top-level `ascend-hybrid`."""

import sys

from ascend_hybrid.devcluster.cli import main

arguments = sys.argv[1:]
sys.exit(main(arguments if arguments[:1] == ["dev-cluster"] else ["dev-cluster", *arguments]))
