"""Tools that need a source checkout. The operator never imports them; only `cli/commands.py` registers their
commands, lazily.

- chartgen: the CRD from the pydantic models, the Helm chart and its golden renders (`crd`, `chart` commands).
- demo_command: `ascend-hybrid demo`, dispatching to demo (the example jobs, a real job training, in-place
  recovery) or kueue_demo (two teams against one quota, built on demo's steps).
- profiles: where a process's CPU goes, from py-spy's sampled stacks (the benchmarks' `--profile`).
- repo: where the source checkout is, or NotACheckout.
"""
