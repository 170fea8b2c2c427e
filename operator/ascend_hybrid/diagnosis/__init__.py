"""Why an attempt broke and what follows (core): `failures` finds and classifies the first failure of a gang;
`policy` judges it (spec.runPolicy.failurePolicy, then the default actions per cause); `hints` says what to change;
`refusals` holds the apiserver's refusals of the job's own writes as observations."""
