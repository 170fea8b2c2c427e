"""Wire facts the operator shares with the systems around it, each in one home (the bottom layer of the core).

`ascend` — MindCluster's and the Ascend device plugin's names and annotations and their one parser; `chips` — what
each chip generation offers (the table the API, rules, inventory, placement and planner read); `kueue` — Kueue's
pod-group contract; `volcano` — Volcano's PodGroup contract and what MindCluster's Ascend plugin reads there;
`names` — the API group, child names, labels, gates and paths; `conditions` — metav1.Condition bookkeeping, job
phases, RFC 3339; `podview` — every accessor of an observed Pod or Node; `untrusted` — reading what pods and
ConfigMaps write within bounds (sizes, depth, integers, times, gzip), refusing the rest by name."""
