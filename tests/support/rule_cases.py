"""The one table of every validation rule's failing example, its message and a passing neighbour (design §3).
test_rules checks each through rules.parse; test_cli checks the CLI prints exactly the same message."""

from __future__ import annotations

import copy

BASE = {"parallelism": {"data": 2, "tensor": 4}, "npu": {"perPod": 8}}  # world 8, one 8-NPU 910B pod


KUEUE_OR_VOLCANO = ("spec.scheduling.queue (a Kueue LocalQueue) and Volcano (spec.scheduling.schedulerName: volcano, "
                    "or spec.scheduling.volcano) exclude each other: a job is admitted by Kueue or scheduled by "
                    "Volcano, not both (a Volcano Queue is spec.scheduling.volcano.queue)")


def spec_with(**sections) -> dict:
    """BASE with sections replaced (not merged): spec_with(npu={...})."""
    spec = copy.deepcopy(BASE)
    for key, value in sections.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return spec


RULE_CASES = [
    ("parallelism-required", {"npu": {"perPod": 8}}, "spec.parallelism: is required", BASE),
    ("data-ge-1", spec_with(parallelism={"data": 0, "tensor": 8}), "spec.parallelism.data=0 must be ≥ 1",
     spec_with(parallelism={"data": 1, "tensor": 8})),
    ("tensor-ge-1", spec_with(parallelism={"data": 8, "tensor": 0}), "spec.parallelism.tensor=0 must be ≥ 1",
     spec_with(parallelism={"data": 8, "tensor": 1})),
    ("pipeline-ge-1", spec_with(parallelism={"data": 2, "tensor": 4, "pipeline": 0}),
     "spec.parallelism.pipeline=0 must be ≥ 1", spec_with(parallelism={"data": 2, "tensor": 4, "pipeline": 1})),
    ("expert-ge-1", spec_with(parallelism={"data": 2, "tensor": 4, "expert": 0}),
     "spec.parallelism.expert=0 must be ≥ 1", spec_with(parallelism={"data": 2, "tensor": 4, "expert": 1})),
    ("data-integer", spec_with(parallelism={"data": "2", "tensor": 4}),
     "spec.parallelism.data='2': must be an integer", BASE),
    ("tensor-not-bool", spec_with(parallelism={"data": 8, "tensor": True}),
     "spec.parallelism.tensor=true: must be an integer",
     spec_with(parallelism={"data": 8, "tensor": 1})),
    ("unknown-parallelism-field", spec_with(parallelism={"data": 2, "tensor": 4, "bogus": 1}),
     "spec.parallelism.bogus: unknown field", BASE),
    ("unknown-spec-field", {**BASE, "replicas": 3}, "spec.replicas: unknown field", BASE),
    ("unknown-nested-field", spec_with(template={"metadata": {"labels": {"a": "b"}, "finalizers": []}}),
     "spec.template.metadata.finalizers: unknown field", spec_with(template={"metadata": {"labels": {"a": "b"}}})),
    ("world-max", spec_with(parallelism={"data": 16384, "tensor": 8}),
     "spec.parallelism: world size data×tensor×pipeline=131072 exceeds 65536",
     spec_with(parallelism={"data": 8192, "tensor": 8})),
    ("perPod-divides-world", spec_with(parallelism={"data": 3}, npu={"perPod": 2}),
     "spec.npu.perPod=2 must divide the world size data×tensor×pipeline=3",
     spec_with(parallelism={"data": 4}, npu={"perPod": 2})),
    ("tensor-divides-perPod", spec_with(parallelism={"data": 4, "tensor": 3}, npu={"perPod": 4},
                                        model={"heads": 12, "hidden": 384}),
     "spec.parallelism.tensor=3 must divide spec.npu.perPod=4",
     spec_with(parallelism={"data": 4, "tensor": 3}, npu={"perPod": 6}, model={"heads": 12, "hidden": 384})),
    ("perPod-910A", spec_with(parallelism={"data": 3}, npu={"perPod": 3, "chip": "910A"}),
     "spec.npu.perPod=3 is not allowed for chip 910A (allowed: 1, 2, 4, 8)",
     spec_with(parallelism={"data": 4}, npu={"perPod": 4, "chip": "910A"})),
    ("perPod-910B", spec_with(parallelism={"data": 12}, npu={"perPod": 12, "chip": "910B"}),
     "spec.npu.perPod=12 is not allowed for chip 910B (allowed: 1, 2, 3, 4, 5, 6, 7, 8)",
     spec_with(parallelism={"data": 7}, npu={"perPod": 7, "chip": "910B"})),
    ("perPod-A3", spec_with(parallelism={"data": 3}, npu={"perPod": 3, "chip": "A3"}),
     "spec.npu.perPod=3 is not allowed for chip A3 (allowed: 2, 4, 6, 8, 10, 12, 14, 16)",
     spec_with(parallelism={"data": 14}, npu={"perPod": 14, "chip": "A3"})),
    ("perPod-max", spec_with(parallelism={"data": 32}, npu={"perPod": 32, "chip": "A3"}),
     "spec.npu.perPod=32 must be ≤ 16", spec_with(parallelism={"data": 32}, npu={"perPod": 16, "chip": "A3"})),
    ("perPod-min", spec_with(npu={"perPod": 0}), "spec.npu.perPod=0 must be ≥ 1", BASE),
    ("chip-enum", spec_with(npu={"perPod": 8, "chip": "910C"}),
     "spec.npu.chip='910C' must be one of '910A', '910B' or 'A3'", spec_with(npu={"perPod": 8, "chip": "910A"})),
    ("microBatches", spec_with(parallelism={"data": 2, "tensor": 4, "pipeline": 4, "microBatches": 3}),
     "spec.parallelism.microBatches=3 must be ≥ spec.parallelism.pipeline=4",
     spec_with(parallelism={"data": 2, "tensor": 4, "pipeline": 4, "microBatches": 4})),
    ("layers-pipeline", spec_with(parallelism={"data": 2, "tensor": 4, "pipeline": 5}),
     "spec.model.layers=24 must be divisible by spec.parallelism.pipeline=5",
     spec_with(parallelism={"data": 2, "tensor": 4, "pipeline": 5}, model={"layers": 25})),
    ("heads-tensor", spec_with(parallelism={"data": 1, "tensor": 8}, model={"heads": 12, "hidden": 384}),
     "spec.model.heads=12 must be divisible by spec.parallelism.tensor=8",
     spec_with(parallelism={"data": 1, "tensor": 8}, model={"heads": 16, "hidden": 384})),
    ("hidden-heads", spec_with(model={"hidden": 100}),
     "spec.model.hidden=100 must be divisible by spec.model.heads=8", spec_with(model={"hidden": 104})),
    ("custom-needs-all", spec_with(model={"preset": "custom"}),
     "spec.model: preset custom needs layers, hidden, heads, vocab",
     spec_with(model={"preset": "custom", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100})),
    ("custom-needs-some", spec_with(model={"preset": "custom", "layers": 2, "hidden": 64}),
     "spec.model: preset custom needs heads, vocab",
     spec_with(model={"preset": "custom", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100})),
    ("preset-enum", spec_with(model={"preset": "llama"}),
     "spec.model.preset='llama' must be one of 'tiny', 'gpt-1b', 'moe-100b' or 'custom'",
     spec_with(model={"preset": "gpt-1b"})),
    ("expert-needs-experts", spec_with(parallelism={"data": 2, "tensor": 4, "expert": 2}),
     "spec.parallelism.expert=2 needs spec.model.experts > 0",
     spec_with(parallelism={"data": 2, "tensor": 4, "expert": 2}, model={"experts": 4})),
    ("top-k-within-experts", spec_with(model={"experts": 4, "topK": 6}),
     "spec.model.topK=6 must not exceed spec.model.experts=4 (each token goes to topK distinct experts)",
     spec_with(model={"experts": 4, "topK": 4})),
    ("top-k-default-within-experts", spec_with(model={"preset": "custom", "layers": 2, "hidden": 64, "heads": 4,
                                                      "vocab": 128, "experts": 1}),
     "spec.model.topK=2 must not exceed spec.model.experts=1 (each token goes to topK distinct experts)",
     spec_with(model={"preset": "custom", "layers": 2, "hidden": 64, "heads": 4, "vocab": 128, "experts": 1,
                      "topK": 1})),
    ("experts-divisible", spec_with(parallelism={"data": 4, "tensor": 2, "expert": 4}, model={"experts": 6}),
     "spec.model.experts=6 must be divisible by spec.parallelism.expert=4",
     spec_with(parallelism={"data": 4, "tensor": 2, "expert": 4}, model={"experts": 8})),
    ("expert-divides-data", spec_with(parallelism={"data": 2, "tensor": 4, "expert": 4}, model={"experts": 8}),
     "spec.parallelism.expert=4 must divide spec.parallelism.data=2 (expertPlacement dataParallel)",
     spec_with(parallelism={"data": 2, "tensor": 4, "expert": 2}, model={"experts": 8})),
    ("expert-inside-tensor",
     spec_with(parallelism={"data": 4, "tensor": 2, "expert": 4, "expertPlacement": "intraNode"},
               npu={"perPod": 8}, model={"experts": 8}),
     "spec.parallelism.expert=4 must divide spec.parallelism.tensor=2 (expertPlacement intraNode carves the expert "
     "groups out of the TP group)",
     spec_with(parallelism={"data": 4, "tensor": 4, "expert": 4, "expertPlacement": "intraNode"},
               npu={"perPod": 8}, model={"experts": 8})),
    ("expertPlacement-enum", spec_with(parallelism={"data": 2, "tensor": 4, "expertPlacement": "rack"}),
     "spec.parallelism.expertPlacement='rack' must be one of 'dataParallel' or 'intraNode'",
     spec_with(parallelism={"data": 2, "tensor": 4, "expertPlacement": "intraNode"})),
    ("globalBatchSize", spec_with(training={"globalBatchSize": 3}),
     "spec.training.globalBatchSize=3 must be a multiple of data×microBatches=2",
     spec_with(training={"globalBatchSize": 6})),
    ("backoffLimit", spec_with(runPolicy={"backoffLimit": -1}), "spec.runPolicy.backoffLimit=-1 must be ≥ 0",
     spec_with(runPolicy={"backoffLimit": 0})),
    ("schedulingTimeoutSeconds", spec_with(runPolicy={"schedulingTimeoutSeconds": 0}),
     "spec.runPolicy.schedulingTimeoutSeconds=0 must be ≥ 1", spec_with(runPolicy={"schedulingTimeoutSeconds": 1})),
    ("activeDeadlineSeconds", spec_with(runPolicy={"activeDeadlineSeconds": 0}),
     "spec.runPolicy.activeDeadlineSeconds=0 must be ≥ 1", spec_with(runPolicy={"activeDeadlineSeconds": 1})),
    ("ttlSecondsAfterFinished", spec_with(runPolicy={"ttlSecondsAfterFinished": -1}),
     "spec.runPolicy.ttlSecondsAfterFinished=-1 must be ≥ 0", spec_with(runPolicy={"ttlSecondsAfterFinished": 0})),
    ("cleanPodPolicy", spec_with(runPolicy={"cleanPodPolicy": "Some"}),
     "spec.runPolicy.cleanPodPolicy='Some' must be one of 'Running', 'All' or 'None'",
     spec_with(runPolicy={"cleanPodPolicy": "None"})),
    ("learningRate", spec_with(training={"learningRate": 0}), "spec.training.learningRate=0 must be > 0.0",
     spec_with(training={"learningRate": 1})),
    ("checkpoint-claim", spec_with(training={"checkpoint": {"everySteps": 10}}),
     "spec.training.checkpoint.claimName: is required",
     spec_with(training={"checkpoint": {"claimName": "ckpt", "everySteps": 10}})),
    ("env-list-path", spec_with(template={"env": ["A=1"]}),
     "spec.template.env[0]='A=1': must be an object",
     spec_with(template={"env": [{"name": "A", "value": "1"}]})),
    ("failurePolicy-one-matcher",
     spec_with(runPolicy={"failurePolicy": {"rules": [{"causes": ["Unknown"], "exitCodes": [1], "action": "Ignore"}]}}),
     "spec.runPolicy.failurePolicy.rules: each rule sets exactly one of causes, exitCodes or podConditions",
     spec_with(runPolicy={"failurePolicy": {"rules": [{"exitCodes": [1], "action": "Ignore"}]}})),
    ("failurePolicy-no-avoid-for-software",
     spec_with(runPolicy={"failurePolicy": {"rules": [{"causes": ["DataError"], "action": "RestartJobAvoidingNode"}]}}),
     "spec.runPolicy.failurePolicy.rules: ConfigError and DataError are failures of the job itself: "
     "RestartJobAvoidingNode would mark a healthy node (use RestartJob or FailJob)",
     spec_with(runPolicy={"failurePolicy": {"rules": [{"causes": ["DataError"], "action": "RestartJob"}]}})),
    ("divergenceLossFactor", spec_with(training={"divergenceLossFactor": 0.5}),
     "spec.training.divergenceLossFactor must be 0 (off) or above 1", spec_with(training={"divergenceLossFactor": 0})),
    ("monitoring-straggler-factor", spec_with(monitoring={"stragglerFactor": 1}),
     "spec.monitoring.stragglerFactor=1 must be > 1.0", spec_with(monitoring={"stragglerFactor": 1.2})),
    ("label-string", spec_with(template={"metadata": {"labels": {"team": 7}}}),
     "spec.template.metadata.labels.team=7: must be a string (quote it: '7')",
     spec_with(template={"metadata": {"labels": {"team": "7"}}})),

    # --- wrong types, numbers Kubernetes cannot hold, bounds -------------------------------------------------
    ("steps-integer", spec_with(training={"steps": "x"}), "spec.training.steps='x': must be an integer",
     spec_with(training={"steps": 10})),
    ("steps-not-fractional", spec_with(training={"steps": 1.5}), "spec.training.steps=1.5: must be an integer",
     spec_with(training={"steps": 2})),
    ("learningRate-number", spec_with(training={"learningRate": "fast"}),
     "spec.training.learningRate='fast': must be a number", spec_with(training={"learningRate": 0.5})),
    ("learningRate-finite", spec_with(training={"learningRate": float("inf")}),
     "spec.training.learningRate=Infinity: must be a finite number (JSON and Kubernetes have no NaN or Infinity)",
     spec_with(training={"learningRate": 1e-4})),
    ("learningRate-not-nan", spec_with(training={"learningRate": float("nan")}),
     "spec.training.learningRate=NaN: must be a finite number (JSON and Kubernetes have no NaN or Infinity)",
     spec_with(training={"learningRate": 1e-4})),
    ("learningRate-infinity-word", spec_with(training={"learningRate": "Infinity"}),
     "spec.training.learningRate='Infinity': must be a finite number (JSON and Kubernetes have no NaN or Infinity)",
     spec_with(training={"learningRate": 1e-4})),
    ("int64-steps", spec_with(training={"steps": 2 ** 63}),
     f"spec.training.steps={2 ** 63}: is beyond the int64 range of Kubernetes integers "
     "(-9223372036854775808 to 9223372036854775807)", spec_with(training={"steps": 2 ** 63 - 1})),
    ("int64-in-raw-object", spec_with(template={"tolerations": [{"key": "t", "operator": "Exists",
                                                                 "effect": "NoExecute", "tolerationSeconds": -2 ** 64}]}),
     f"spec.template.tolerations[0].tolerationSeconds={-2 ** 64}: is beyond the int64 range of Kubernetes integers "
     "(-9223372036854775808 to 9223372036854775807)",
     spec_with(template={"tolerations": [{"key": "t", "operator": "Exists", "effect": "NoExecute",
                                          "tolerationSeconds": 60}]})),
    ("seed-32-bit", spec_with(training={"seed": 2 ** 32}), "spec.training.seed=4294967296 must be ≤ 4294967295",
     spec_with(training={"seed": 2 ** 32 - 1})),
    ("parallelism-object", spec_with(parallelism=3), "spec.parallelism=3: must be an object", BASE),
    ("suspend-boolean", spec_with(runPolicy={"suspend": "no"}), "spec.runPolicy.suspend='no': must be a boolean",
     spec_with(runPolicy={"suspend": False})),
    ("tiers-list", spec_with(scheduling={"topologyTiers": "rack"}), "spec.scheduling.topologyTiers='rack': must be a list",
     spec_with(scheduling={"topologyTiers": ["rack"]})),
    ("image-string", spec_with(template={"image": None}), "spec.template.image=null: must be a string",
     spec_with(template={"image": "trainer"})),
    ("imagePullPolicy-enum", spec_with(template={"imagePullPolicy": "always"}),
     "spec.template.imagePullPolicy='always' must be one of 'Always', 'IfNotPresent' or 'Never'",
     spec_with(template={"imagePullPolicy": "Always"})),
    ("tiers-at-most-16", spec_with(scheduling={"topologyTiers": [f"t{i}" for i in range(17)]}),
     "spec.scheduling.topologyTiers: must have at most 16 items",
     spec_with(scheduling={"topologyTiers": [f"t{i}" for i in range(16)]})),
    # --- Kubernetes' own rules, CEL and Python ----------------------------------------------------------------
    ("image-empty", spec_with(template={"image": ""}),
     "spec.template.image: must not be empty (the container image of every pod)",
     spec_with(template={"image": "registry.example.com:5000/team/trainer:1.0"})),
    ("image-whitespace", spec_with(template={"image": "trainer :1"}),
     'spec.template.image="trainer :1" is not an image reference the kubelet can pull ([registry[:port]/]'
     "lowercase/path[:tag][@sha256:digest], no whitespace; e.g. 'registry.example.com/team/trainer:1.0')",
     spec_with(template={"image": "trainer:1"})),
    ("image-uppercase", spec_with(template={"image": "team/Trainer"}),
     'spec.template.image="team/Trainer" is not an image reference the kubelet can pull ([registry[:port]/]'
     "lowercase/path[:tag][@sha256:digest], no whitespace; e.g. 'registry.example.com/team/trainer:1.0')",
     spec_with(template={"image": "Registry.Example/team/trainer"})),
    ("image-digest", spec_with(template={"image": "trainer@sha256:" + "A" * 64}),
     f'spec.template.image="trainer@sha256:{"A" * 64}": a sha256 digest is 64 lower-case hexadecimal characters',
     spec_with(template={"image": "trainer@sha256:" + "a" * 64})),
    ("serviceAccountName", spec_with(template={"serviceAccountName": "Trainer_SA"}),
     'spec.template.serviceAccountName="Trainer_SA": must be a lowercase RFC 1123 subdomain (a ServiceAccount '
     "name): lower case alphanumeric characters, '-' or '.', starting and ending with an alphanumeric character "
     "(e.g. 'example.com')", spec_with(template={"serviceAccountName": "trainer-sa"})),
    ("priorityClassName", spec_with(template={"priorityClassName": "high-"}),
     'spec.template.priorityClassName="high-": must be a lowercase RFC 1123 subdomain (a PriorityClass name): '
     "lower case alphanumeric characters, '-' or '.', starting and ending with an alphanumeric character "
     "(e.g. 'example.com')", spec_with(template={"priorityClassName": "high.example"})),
    ("schedulerName", spec_with(scheduling={"schedulerName": "my scheduler"}),
     'spec.scheduling.schedulerName="my scheduler": must be a lowercase RFC 1123 subdomain (a scheduler name): '
     "lower case alphanumeric characters, '-' or '.', starting and ending with an alphanumeric character "
     "(e.g. 'example.com')", spec_with(scheduling={"schedulerName": "volcano"})),
    ("imagePullSecrets", spec_with(template={"imagePullSecrets": ["registry", "Registry Key"]}),
     'spec.template.imagePullSecrets: "Registry Key" must be a lowercase RFC 1123 subdomain (a Secret name): '
     "lower case alphanumeric characters, '-' or '.', starting and ending with an alphanumeric character "
     "(e.g. 'example.com')", spec_with(template={"imagePullSecrets": ["registry", "registry-key"]})),
    ("claimName", spec_with(training={"checkpoint": {"claimName": ""}}),
     'spec.training.checkpoint.claimName="": must be a lowercase RFC 1123 subdomain (a PersistentVolumeClaim name): '
     "lower case alphanumeric characters, '-' or '.', starting and ending with an alphanumeric character "
     "(e.g. 'example.com')", spec_with(training={"checkpoint": {"claimName": "ckpt"}})),
    ("queue-name", spec_with(scheduling={"queue": "Team_A"}),
     'spec.scheduling.queue="Team_A" must name a Kueue LocalQueue the pods can carry as a label: a lowercase RFC 1123 '
     "subdomain (lower case alphanumeric characters, '-' or '.', starting and ending with an alphanumeric character) "
     "of at most 63 characters (e.g. 'team-a')", spec_with(scheduling={"queue": "team-a"})),
    ("topologyTiers-label-key", spec_with(scheduling={"topologyTiers": ["huawei.com/topotree.rackid", "zone id"]}),
     'spec.scheduling.topologyTiers: "zone id" is not a valid node label key: an optional DNS subdomain prefix (at '
     "most 253 characters) and '/', then a name of at most 63 characters that must consist of alphanumeric "
     "characters, '-', '_' or '.', and must start and end with an alphanumeric character "
     "(e.g. 'huawei.com/topotree.rackid')",
     spec_with(scheduling={"topologyTiers": ["huawei.com/topotree.rackid", "topology.kubernetes.io/zone"]})),
    # --- annotations the device plugin, Volcano, Kueue and the operator write on the pods (CEL and Python) -------
    ("annotation-reserved", spec_with(template={"metadata": {"annotations": {
        "team": "nlp", "ascend.kubectl.kubernetes.io/ascend-910-configuration": '{"devices": []}'}}}),
     'spec.template.metadata.annotations: key "ascend.kubectl.kubernetes.io/ascend-910-configuration" is reserved: '
     "the Ascend device plugin, Volcano, Kueue and the operator write it on the pods themselves (prefixes "
     "ascend.kubectl.kubernetes.io/, huawei.com/, volcano.sh/, kueue.x-k8s.io/, hybrid.ascend.dev/; keys "
     "scheduling.k8s.io/group-name, predicate-time, hccl/rankIndex)",
     spec_with(template={"metadata": {"annotations": {"team": "nlp", "sim.hybrid.ascend.dev/runtime": "process"}}})),
    ("annotations-at-most-256", spec_with(template={"metadata": {"annotations": {f"a{i}": "x" for i in range(257)}}}),
     "spec.template.metadata.annotations: must have at most 256 items",
     spec_with(template={"metadata": {"annotations": {f"a{i}": "x" for i in range(256)}}})),
    ("annotation-reserved-key", spec_with(template={"metadata": {"annotations": {"predicate-time": "1"}}}),
     'spec.template.metadata.annotations: key "predicate-time" is reserved: the Ascend device plugin, Volcano, '
     "Kueue and the operator write it on the pods themselves (prefixes ascend.kubectl.kubernetes.io/, huawei.com/, "
     "volcano.sh/, kueue.x-k8s.io/, hybrid.ascend.dev/; keys scheduling.k8s.io/group-name, predicate-time, "
     "hccl/rankIndex)", spec_with(template={"metadata": {"annotations": {"example.com/predicate-time": "1"}}})),
    # --- Kubernetes' own rules, Python only (map keys and free-form objects) ---------------------------------
    ("label-key", spec_with(template={"metadata": {"labels": {"team/": "nlp"}}}),
     'spec.template.metadata.labels: key "team/" is not a valid label key: name part must be non-empty; name part '
     "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
     "character (e.g. 'MyName', 'my.name' or '123-abc')",
     spec_with(template={"metadata": {"labels": {"example.com/team": "nlp"}}})),
    ("label-value", spec_with(template={"metadata": {"labels": {"team": "n" * 64}}}),
     f'spec.template.metadata.labels["team"]="{"n" * 64}" is not a valid label value: must be no more than 63 bytes',
     spec_with(template={"metadata": {"labels": {"team": "n" * 63}}})),
    ("annotation-key", spec_with(template={"metadata": {"annotations": {"example.com/a/b": "x"}}}),
     'spec.template.metadata.annotations: key "example.com/a/b" is not a valid annotation key (a qualified name): '
     "a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
     "alphanumeric character (e.g. 'MyName', 'my.name' or '123-abc') with an optional DNS subdomain prefix and '/' "
     "(e.g. 'example.com/MyName')", spec_with(template={"metadata": {"annotations": {"Example.com/B": "any text"}}})),
    ("nodeSelector-value", spec_with(template={"nodeSelector": {"pool": "npu pool"}}),
     'spec.template.nodeSelector["pool"]="npu pool" is not a valid label value: a valid label must be an empty '
     "string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
     "character (e.g. 'MyValue', 'my_value' or '12345')", spec_with(template={"nodeSelector": {"pool": "npu"}})),
    ("env-name", spec_with(template={"env": [{"name": "A=B", "value": "1"}]}),
     'spec.template.env[0].name="A=B": a valid environment variable name must consist only of printable ASCII '
     "characters other than '='", spec_with(template={"env": [{"name": "my.env-name 1", "value": "1"}]})),
    ("env-value-string", spec_with(template={"env": [{"name": "A", "value": 1}]}),
     "spec.template.env[0].value=1: must be a string (quote it in YAML)",
     spec_with(template={"env": [{"name": "A", "value": "1"}]})),
    ("env-value-and-valueFrom", spec_with(template={"env": [{"name": "A", "value": "1",
                                                             "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]}),
     "spec.template.env[0].valueFrom: may not be specified when `value` is not empty",
     spec_with(template={"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]})),
    ("env-unknown-field", spec_with(template={"env": [{"name": "A", "vaule": "1"}]}),
     "spec.template.env[0].vaule: unknown field (an EnvVar has name, value and valueFrom)",
     spec_with(template={"env": [{"name": "A", "value": "1"}]})),
    ("hccl-env-name", spec_with(hccl={"env": {"HCCL=X": "1"}}),
     'spec.hccl.env: key "HCCL=X": a valid environment variable name must consist only of printable ASCII '
     "characters other than '='", spec_with(hccl={"env": {"HCCL_X": "1"}})),
    ("quantity", spec_with(template={"resources": {"requests": {"memory": "16 GB"}}}),
     'spec.template.resources.requests["memory"]="16 GB" is not a valid quantity (e.g. \'500m\', \'4\', \'16Gi\', '
     "'1e3'): quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
     spec_with(template={"resources": {"requests": {"memory": "16G"}}})),
    ("quantity-suffix", spec_with(template={"resources": {"limits": {"cpu": "2x"}}}),
     'spec.template.resources.limits["cpu"]="2x" is not a valid quantity (e.g. \'500m\', \'4\', \'16Gi\', '
     "'1e3'): quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
     spec_with(template={"resources": {"limits": {"cpu": "2k"}}})),
    ("quantity-nonnegative", spec_with(template={"resources": {"requests": {"cpu": "-1"}}}),
     'spec.template.resources.requests["cpu"]="-1": must be greater than or equal to 0',
     spec_with(template={"resources": {"requests": {"cpu": "0"}}})),
    ("request-le-limit", spec_with(template={"resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}}),
     'spec.template.resources.requests["memory"]="2Gi": must be less than or equal to the memory limit of "1Gi"',
     spec_with(template={"resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}})),
    ("resource-name", spec_with(template={"resources": {"requests": {"gpu": "1"}}}),
     'spec.template.resources.requests: "gpu" must be a standard resource for containers (cpu, memory, '
     "ephemeral-storage, hugepages-<size>) or fully qualified (example.com/device)",
     spec_with(template={"resources": {"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "1"}}})),
    ("extended-resource-integer", spec_with(template={"resources": {"limits": {"example.com/nic": "500m"}}}),
     'spec.template.resources.limits["example.com/nic"]="500m": must be an integer (extended resources are whole '
     "units)", spec_with(template={"resources": {"limits": {"example.com/nic": "1"}}})),
    ("toleration-operator", spec_with(template={"tolerations": [{"key": "npu", "operator": "exists"}]}),
     "spec.template.tolerations[0].operator=\"exists\": must be one of 'Equal' or 'Exists' (Lt and Gt need the "
     "alpha gate TaintTolerationComparisonOperators)",
     spec_with(template={"tolerations": [{"key": "npu", "operator": "Exists"}]})),
    ("toleration-effect", spec_with(template={"tolerations": [{"key": "npu", "operator": "Exists",
                                                                "effect": "NoExecution"}]}),
     "spec.template.tolerations[0].effect=\"NoExecution\": must be one of 'NoSchedule', 'PreferNoSchedule' or "
     "'NoExecute' (or empty: every effect)",
     spec_with(template={"tolerations": [{"key": "npu", "operator": "Exists", "effect": "NoExecute"}]})),
    ("toleration-key", spec_with(template={"tolerations": [{"key": "npu/", "operator": "Exists"}]}),
     'spec.template.tolerations[0].key="npu/" is not a valid taint key (a qualified name): name part must be '
     "non-empty; name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
     "an alphanumeric character (e.g. 'MyName', 'my.name' or '123-abc')",
     spec_with(template={"tolerations": [{"key": "example.com/npu", "operator": "Exists"}]})),
    ("toleration-exists-value", spec_with(template={"tolerations": [{"key": "npu", "operator": "Exists",
                                                                      "value": "x"}]}),
     "spec.template.tolerations[0].value=\"x\": value must be empty when `operator` is 'Exists'",
     spec_with(template={"tolerations": [{"key": "npu", "operator": "Equal", "value": "x"}]})),
    ("toleration-equal-value", spec_with(template={"tolerations": [{"key": "npu", "value": "a b"}]}),
     'spec.template.tolerations[0].value="a b" is not a valid toleration value (a label value): a valid label must '
     "be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
     "alphanumeric character (e.g. 'MyValue', 'my_value' or '12345')",
     spec_with(template={"tolerations": [{"key": "npu", "value": "a-b"}]})),
    ("toleration-empty-key", spec_with(template={"tolerations": [{"operator": "Equal", "value": "x"}]}),
     'spec.template.tolerations[0].operator="Equal": operator must be Exists when `key` is empty, which means '
     '"match all values and all keys"', spec_with(template={"tolerations": [{"operator": "Exists"}]})),
    ("toleration-seconds-effect", spec_with(template={"tolerations": [{"key": "npu", "operator": "Exists",
                                                                        "tolerationSeconds": 30}]}),
     "spec.template.tolerations[0].effect=\"\": effect must be 'NoExecute' when `tolerationSeconds` is set",
     spec_with(template={"tolerations": [{"key": "npu", "operator": "Exists", "effect": "NoExecute",
                                          "tolerationSeconds": 30}]})),
    ("volume-name", spec_with(template={"volumes": [{"name": "Data", "emptyDir": {}}]}),
     'spec.template.volumes[0].name="Data" is not a valid volume name: a lowercase RFC 1123 label must consist of '
     "lower case alphanumeric characters or '-', and must start and end with an alphanumeric character "
     "(e.g. 'my-name' or '123-abc')", spec_with(template={"volumes": [{"name": "data", "emptyDir": {}}]})),
    ("volume-source", spec_with(template={"volumes": [{"name": "data"}]}),
     "spec.template.volumes[0]: must specify a volume type (emptyDir, persistentVolumeClaim, configMap, …)",
     spec_with(template={"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]})),
    ("volume-reserved", spec_with(template={"volumes": [{"name": "ascend-job-config", "emptyDir": {}}]}),
     'spec.template.volumes[0].name="ascend-job-config": is the name of a volume the operator adds',
     spec_with(template={"volumes": [{"name": "job-config", "emptyDir": {}}]})),
    ("volumeMount-volume", spec_with(template={"volumeMounts": [{"name": "data", "mountPath": "/data"}]}),
     'spec.template.volumeMounts[0].name="data": not found among the pod\'s volumes (ascend-job-config, '
     "ascend-ranktable)", spec_with(template={"volumes": [{"name": "data", "emptyDir": {}}],
                                             "volumeMounts": [{"name": "data", "mountPath": "/data"}]})),
    ("volumeMount-path", spec_with(template={"volumes": [{"name": "data", "emptyDir": {}}],
                                             "volumeMounts": [{"name": "data", "mountPath": "/etc/ascend-hybrid"}]}),
     'spec.template.volumeMounts[0].mountPath="/etc/ascend-hybrid": is a path the operator mounts',
     spec_with(template={"volumes": [{"name": "data", "emptyDir": {}}],
                         "volumeMounts": [{"name": "data", "mountPath": "/etc/ascend-hybrid/data"}]})),
    ("pipelineLayers-per-stage", spec_with(parallelism={"data": 2, "tensor": 2, "pipeline": 2,
                                                        "pipelineLayers": [10, 8, 6]}),
     "spec.parallelism.pipelineLayers has 3 entries: it needs one per stage, spec.parallelism.pipeline=2",
     spec_with(parallelism={"data": 2, "tensor": 2, "pipeline": 2, "pipelineLayers": [13, 11]})),
    ("pipelineLayers-sum", spec_with(parallelism={"data": 2, "tensor": 2, "pipeline": 2, "pipelineLayers": [13, 12]}),
     "spec.parallelism.pipelineLayers sums to 25: it must sum to spec.model.layers=24",
     spec_with(parallelism={"data": 2, "tensor": 2, "pipeline": 2, "pipelineLayers": [14, 10]})),
    ("pipelineLayers-even-model", spec_with(parallelism={"data": 2, "tensor": 2, "pipeline": 2},
                                            model={"layers": 25}),
     "spec.model.layers=25 must be divisible by spec.parallelism.pipeline=2",
     spec_with(parallelism={"data": 2, "tensor": 2, "pipeline": 2, "pipelineLayers": [13, 12]},
               model={"layers": 25})),
    ("pipelineLayers-not-interleaved", spec_with(parallelism={"data": 2, "tensor": 2, "pipeline": 2,
                                                              "virtualPipelineStages": 2, "pipelineLayers": [12, 12]}),
     "spec.parallelism.pipelineLayers: not with spec.parallelism.virtualPipelineStages=2 (interleaving cuts the "
     "layers into equal chunks)",
     spec_with(parallelism={"data": 2, "tensor": 2, "pipeline": 2, "pipelineLayers": [12, 12]})),
    ("context-world", spec_with(parallelism={"data": 3, "context": 2}, npu={"perPod": 4},
                                training={"flashAttention": True}),
     "spec.npu.perPod=4 must divide the world size data×tensor×pipeline×context=6",
     spec_with(parallelism={"data": 2, "context": 2}, npu={"perPod": 4}, training={"flashAttention": True})),
    ("context-flash-attention", spec_with(parallelism={"data": 2, "context": 4}),
     "spec.parallelism.context=4 needs spec.training.flashAttention: true (ring attention is a FlashAttentionScore "
     "feature)", spec_with(parallelism={"data": 2, "context": 4}, training={"flashAttention": True})),
    ("context-sequence", spec_with(parallelism={"data": 2, "tensor": 1, "context": 4},
                                   training={"seqLength": 130, "flashAttention": True}),
     "spec.training.seqLength=130 must be divisible by spec.parallelism.context=4 (each context-parallel rank holds "
     "an equal part of the sequence)",
     spec_with(parallelism={"data": 2, "tensor": 1, "context": 4}, training={"seqLength": 128, "flashAttention": True})),
    ("slidingWindow-context", spec_with(parallelism={"data": 4, "context": 2}, model={"slidingWindow": 64},
                                        training={"flashAttention": True}),
     "spec.model.slidingWindow=64: not with spec.parallelism.context=2 (the trainer's ring attention runs the causal "
     "mask only)",
     spec_with(parallelism={"data": 8}, model={"slidingWindow": 64}, training={"flashAttention": True})),
    ("capacityFactor-moe-only", spec_with(model={"preset": "gpt-1b", "capacityFactor": 0.8}),
     "spec.model.capacityFactor: only for MoE models (spec.model.experts > 0)",
     spec_with(model={"preset": "moe-100b", "capacityFactor": 0.8})),
    ("auxLossWeight-moe-only", spec_with(model={"preset": "tiny", "auxLossWeight": 0.001}),
     "spec.model.auxLossWeight: only for MoE models (spec.model.experts > 0)",
     spec_with(model={"preset": "moe-100b", "layers": 8, "auxLossWeight": 0.001})),
    ("slowness-shrink-needs-elastic", spec_with(runPolicy={"slowness": {"action": "Shrink"}}),
     "spec.runPolicy.slowness.action: Shrink needs spec.elastic (the data degree it shrinks, and minData, how far)",
     spec_with(runPolicy={"slowness": {"action": "Shrink"}}, elastic={"minData": 1})),
    ("checkpoint-every-steps-word", spec_with(training={"checkpoint": {"claimName": "ckpt", "everySteps": "often"}}),
     "spec.training.checkpoint.everySteps='often': must be an integer ≥ 1 or auto",
     spec_with(training={"checkpoint": {"claimName": "ckpt", "everySteps": "auto"}})),
    ("checkpoint-every-steps-ge-1", spec_with(training={"checkpoint": {"claimName": "ckpt", "everySteps": 0}}),
     "spec.training.checkpoint.everySteps=0: must be an integer ≥ 1 or auto",
     spec_with(training={"checkpoint": {"claimName": "ckpt", "everySteps": 1}})),
    ("elastic-min-data", spec_with(elastic={"minData": 3}),
     "spec.elastic.minData=3 must be ≤ spec.parallelism.data=2", spec_with(elastic={"minData": 2})),
    ("elastic-min-data-ge-1", spec_with(elastic={"minData": 0}), "spec.elastic.minData=0 must be ≥ 1",
     spec_with(elastic={"minData": 1})),
    ("elastic-not-auto", {"parallelism": {"auto": True, "world": 8}, "npu": {"perPod": 8},
                          "training": {"globalBatchSize": 8}, "elastic": {"minData": 1}},
     "spec.elastic: not with spec.parallelism.auto: true (the planner's strategy is fixed for the job's life; set "
     "the degrees to shrink the data degree)",
     {"parallelism": {"auto": True, "world": 8}, "npu": {"perPod": 8}, "training": {"globalBatchSize": 8}}),
    ("kueue-or-volcano", spec_with(scheduling={"queue": "team-a", "schedulerName": "volcano"}), KUEUE_OR_VOLCANO,
     spec_with(scheduling={"schedulerName": "volcano"})),
    ("kueue-or-volcano-options", spec_with(scheduling={"queue": "team-a", "volcano": {"queue": "q"}}),
     KUEUE_OR_VOLCANO, spec_with(scheduling={"volcano": {"queue": "q"}})),
    ("volcano-options-need-volcano", spec_with(scheduling={"schedulerName": "kube-batch", "volcano": {}}),
     "spec.scheduling.volcano: only for a job Volcano schedules (spec.scheduling.schedulerName volcano, or empty)",
     spec_with(scheduling={"schedulerName": "volcano", "volcano": {}})),
    ("volcano-queue-name", spec_with(scheduling={"volcano": {"queue": "Team A"}}),
     'spec.scheduling.volcano.queue="Team A": must be a lowercase RFC 1123 subdomain (a Volcano Queue name): lower '
     "case alphanumeric characters, '-' or '.', starting and ending with an alphanumeric character "
     "(e.g. 'example.com')", spec_with(scheduling={"volcano": {"queue": "team-a"}})),
    ("sp-block-whole-a3-nodes", spec_with(scheduling={"volcano": {"spBlock": 16}}, parallelism={"data": 2, "tensor": 8},
                                          npu={"perPod": 8}),
     "spec.scheduling.volcano.spBlock=16: only for chip A3 with spec.npu.perPod=16 (a logical super-pod of whole "
     "nodes)", spec_with(scheduling={"volcano": {"spBlock": 16}}, parallelism={"data": 2, "tensor": 8},
                         npu={"chip": "A3", "perPod": 16})),
    ("sp-block-divides-world", spec_with(scheduling={"volcano": {"spBlock": 48}}, parallelism={"data": 4, "tensor": 8},
                                         npu={"chip": "A3", "perPod": 16}),
     "spec.scheduling.volcano.spBlock=48 must be a multiple of 16 that divides the job's chips, world size 32",
     spec_with(scheduling={"volcano": {"spBlock": 32}}, parallelism={"data": 4, "tensor": 8},
               npu={"chip": "A3", "perPod": 16})),
]
