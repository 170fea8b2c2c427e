"""Kubernetes' own validation rules, checked before any pod exists (pure: standard library only).

The operator copies the job's template into every pod it creates; whatever the apiserver would refuse there (a label
key, an env name, a quantity, a toleration…) would only show up as a refused pod. This module applies the same rules
to the job's own fields, so `ascend-hybrid validate` and the reconcile (the job fails with `InvalidSpec`) name the
job's field and the rule instead. The rules and their messages are those of Kubernetes 1.36:

- label keys (qualified names), label values, DNS-1123 labels and subdomains: k8s.io/apimachinery v0.36.3,
  pkg/api/validate/content/kube.go (`IsLabelKey`, `IsLabelValue`) and dns.go (`IsDNS1123Label`,
  `IsDNS1123Subdomain`); label maps as pkg/apis/meta/v1/validation `ValidateLabels`;
- annotation keys (qualified names, lower-cased first) and the 256 KiB total: pkg/api/validation/objectmeta.go
  `ValidateAnnotations`;
- environment variable names: pkg/util/validation/validation.go `IsRelaxedEnvVarName` (printable ASCII except '=';
  the RelaxedEnvironmentVariableValidation gate is GA and gone in 1.36, so the apiserver always applies it);
- quantities: pkg/api/resource/quantity.go `ParseQuantity` (the scanner `parseQuantityString` and the suffixes of
  suffix.go, ported as they are, quirks included); resource names, non-negative values, integer extended
  resources and requests ≤ limits: kubernetes pkg/apis/core/validation `ValidateResourceRequirements`;
- tolerations: pkg/apis/core/validation `ValidateTolerations` (Lt/Gt need the alpha gate
  TaintTolerationComparisonOperators, off by default in 1.36, so only Equal and Exists are accepted);
- images: the kubelet parses them with github.com/distribution/reference `ParseNormalizedNamed` (regexp.go's
  ReferenceRegexp; a name that does not parse leaves the pod waiting in `InvalidImageName` for ever).

Regular expressions are written once, without anchors, in the common subset of RE2 (CEL's `matches`, at admission)
and Python's `re` (`fullmatch` here): explicit ASCII classes instead of `\\w` and `[[:xdigit:]]`.
"""

from ascend_hybrid.spec.k8s_validation.image import *  # noqa: F403
from ascend_hybrid.spec.k8s_validation.names import *  # noqa: F403
from ascend_hybrid.spec.k8s_validation.objects import *  # noqa: F403
from ascend_hybrid.spec.k8s_validation.pod_fields import *  # noqa: F403
from ascend_hybrid.spec.k8s_validation.quantity import *  # noqa: F403
