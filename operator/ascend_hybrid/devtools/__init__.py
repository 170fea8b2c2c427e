"""Tools that need a source checkout (CRD, chart and manifest generation, the demo). The operator never imports
them; only `cli/commands.py` registers their commands, lazily."""
