"""The corpus of bad input: one file per class under fixtures/bad-input/, the command that reads it and
the exact `error:` lines it must give (exit code 2), with the field each names. test_bad_input runs them all.

In commands and lines, {file} is the corpus file, {examples} deploy/examples; `stdin` feeds the file to `-f -`.
"""

from __future__ import annotations

from dataclasses import dataclass

from support.paths import REPO_ROOT

BAD_INPUT = REPO_ROOT / "tests" / "support" / "fixtures" / "bad-input"
FINITE = "must be a finite number (JSON and Kubernetes have no NaN or Infinity)"
QUANTITY = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
LABEL_NAME = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
              "character (e.g. 'MyName', 'my.name' or '123-abc')")


@dataclass(frozen=True)
class BadInput:
    file: str
    command: tuple[str, ...]
    errors: tuple[str, ...]
    field: str | tuple[str, ...]  # what each error line names (a spec field, a flag, the file): one, or one a line
    stdout: str = ""
    notes: tuple[str, ...] = ()
    stdin: bool = False


VALIDATE = ("validate", "-f", "{file}")

BAD_INPUTS = [
    BadInput("non-finite.yaml", VALIDATE, (f"spec.training.learningRate=Infinity: {FINITE}",),
             "spec.training.learningRate"),
    BadInput("non-finite.json", VALIDATE, (f"spec.training.learningRate='NaN': {FINITE}",),
             "spec.training.learningRate"),
    BadInput("int64-overflow.yaml", VALIDATE,
             ("spec.training.steps=9223372036854775808: is beyond the int64 range of Kubernetes integers "
              "(-9223372036854775808 to 9223372036854775807)",), "spec.training.steps"),
    BadInput("multi-document.yaml", VALIDATE, ("second-job: spec.parallelism.data=0 must be ≥ 1",),
             "spec.parallelism.data",
             stdout="first-job: valid (world 4 = DP 2 × TP 2 × PP 1, EP 1, 2 pods × 2 910B)\n",
             notes=("{file}: document 2 (line 10): ConfigMap 'settings' is not an AscendHybridJob: not checked",)),
    BadInput("duplicate-key.yaml", VALIDATE,
             ("{file}: duplicate key 'steps' at line 12, column 5 (first at line 10, column 5): YAML would keep only "
              "the last value, silently",), "'steps'"),
    BadInput("yaml-syntax.yaml", VALIDATE,
             ("{file}: not valid YAML at line 10, column 12: did not find expected ',' or '}' (while parsing a flow "
              "mapping started at line 9, column 13)",), "line 10, column 12"),
    BadInput("wrong-type.yaml", VALIDATE, ("spec.training.steps='many': must be an integer",), "spec.training.steps"),
    BadInput("label-key.yaml", VALIDATE,
             (f'spec.template.metadata.labels: key "team name" is not a valid label key: name part {LABEL_NAME}',),
             "spec.template.metadata.labels"),
    BadInput("label-value.yaml", VALIDATE,
             ('spec.template.metadata.labels["team"]="natural-language-processing-and-large-scale-pretraining-group-'
              '2024" is not a valid label value: must be no more than 63 bytes',), "spec.template.metadata.labels"),
    BadInput("annotation-key.yaml", VALIDATE,
             ('spec.template.metadata.annotations: key "example.com/owner/name" is not a valid annotation key (a '
              f"qualified name): a valid label key {LABEL_NAME} with an optional DNS "
              "subdomain prefix and '/' (e.g. 'example.com/MyName')",), "spec.template.metadata.annotations"),
    BadInput("env-name.yaml", VALIDATE,
             ('spec.template.env[0].name="LOG=LEVEL": a valid environment variable name must consist only of '
              "printable ASCII characters other than '='",), "spec.template.env[0].name"),
    BadInput("quantity.yaml", VALIDATE,
             ('spec.template.resources.requests["memory"]="16 GB" is not a valid quantity (e.g. \'500m\', \'4\', '
              f"'16Gi', '1e3'): {QUANTITY}",), "spec.template.resources.requests"),
    BadInput("empty-image.yaml", VALIDATE, ("spec.template.image: must not be empty (the container image of every pod)",),
             "spec.template.image"),
    BadInput("toleration.yaml", VALIDATE,
             ("spec.template.tolerations[0].operator=\"exists\": must be one of 'Equal' or 'Exists' (Lt and Gt need "
              "the alpha gate TaintTolerationComparisonOperators)",), "spec.template.tolerations[0].operator"),
    BadInput("topology-tier.yaml", VALIDATE,
             ('spec.scheduling.topologyTiers: "rack id" is not a valid node label key: an optional DNS subdomain '
              "prefix (at most 253 characters) and '/', then a name of at most 63 characters that must consist of "
              "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character "
              "(e.g. 'huawei.com/topotree.rackid')",), "spec.scheduling.topologyTiers"),
    BadInput("malformed-node.yaml", ("render", "-f", "{examples}/job.yaml", "--nodes", "{file}"),
             ('{file}: document 1 (line 2), item 1: Node: metadata.labels=["accelerator-type=module-910b-8"]: must be '
              "an object",
              '{file}: document 1 (line 2), item 1: Node: status.allocatable["huawei.com/Ascend910"]="eight": is not a '
              f"valid quantity: {QUANTITY}"), ("metadata.labels", "status.allocatable")),
    BadInput("malformed-pods.yaml", ("ranktable", "-f", "{examples}/job.yaml", "--pods", "{file}"),
             ("{file}: document 1 (line 2), item 2 is a string, not a Kubernetes object",), "item 2"),
    BadInput("pods-wrong-types.yaml", ("render", "-f", "{examples}/job.yaml", "--nodes", "{examples}/nodes-16x8.yaml",
                                       "--pods", "{file}"),
             ('{file}: document 1 (line 2): Pod: spec.containers[0].resources.requests["huawei.com/Ascend910"]="all": '
              f"is not a valid quantity: {QUANTITY}",
              "{file}: document 1 (line 2): Pod: status.phase=1: must be a string"),
             ("spec.containers[0].resources.requests", "status.phase")),
    BadInput("negative-attempt.yaml", ("render", "-f", "{file}", "--nodes", "{examples}/nodes-16x8.yaml",
                                       "--attempt", "-5"),
             ("--attempt=-5: must be ≥ 1 (attempts count from 1)",), "--attempt"),
    BadInput("empty.yaml", VALIDATE, ("{file}: empty: no YAML document",), "{file}"),
    BadInput("binary.bin", VALIDATE,
             ("{file}: not valid YAML at line 1, column 1: unacceptable character #x007f: special characters are not "
              "allowed (a binary file?)",), "{file}"),
    BadInput("no-job.yaml", VALIDATE,
             ("{file}: no AscendHybridJob object found: document 1 (line 2) has kind 'ConfigMap'; expected kind: "
              "AscendHybridJob, apiVersion: hybrid.ascend.dev/v1alpha1",), "{file}"),
    BadInput("misspelled-kind.yaml", VALIDATE,
             ("{file}: no AscendHybridJob object found: document 1 (line 2) has kind 'AscendHybridjob'; expected "
              "kind: AscendHybridJob (kinds are case-sensitive), apiVersion: hybrid.ascend.dev/v1alpha1",), "kind"),
    BadInput("python-field-name.yaml", VALIDATE, ("spec.parallelism.micro_batches: unknown field",),
             "spec.parallelism.micro_batches"),
    BadInput("top-k-above-experts.yaml", VALIDATE,
             ("spec.model.topK=4 must not exceed spec.model.experts=2 (each token goes to topK distinct experts)",),
             "spec.model.topK"),
    BadInput("a-directory", VALIDATE, ("{file}: Is a directory",), "{file}"),
    BadInput("garbage.txt", ("validate", "-f", "-"),
             ("-: not valid YAML at line 2, column 1: unacceptable character #x0001: special characters are not "
              "allowed (a binary file?)",), "-: ", stdin=True),
    BadInput("hardware-non-finite.yaml", ("plan", "-f", "{examples}/job.yaml", "--hardware", "{file}"),
             ("{file}: hbmGiB: must be a finite number (not NaN or Infinity)",), "hbmGiB"),
]
