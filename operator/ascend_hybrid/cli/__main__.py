"""`python -m ascend_hybrid.cli`: the `ascend-hybrid` command. It imports cli.commands as a module rather than running
it as __main__, so that there is one InputError class (a __main__ copy would have its own, which main() would not
catch when cli.plan raises it)."""

from ascend_hybrid.cli.commands import main

raise SystemExit(main())
