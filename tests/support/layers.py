"""The package's layers, as docs/architecture.md's module map lists them (tests/contract reads them)."""

# The core's sub-packages, bottom first: each may import those before it, never those after it.
CORE_ORDER = ("contracts", "spec", "gang", "planner", "monitoring", "diagnosis", "reconcile")
# The shell's layers: cli/ (the commands, which start the operator, the dev tools and the dev cluster) may import
# every other; controller/ the core; devtools/ and devcluster/ as the layering test says.
SHELL = ("cli", "controller", "devtools", "devcluster")
