"""The bundled MindSpore trainer of AscendHybridJob: launcher, model, parallel strategy, local runner.

Never imported by the operator; the contract between them is the pod's env and mounted files (design §8–§9).
"""

__version__ = "0.1.0"
