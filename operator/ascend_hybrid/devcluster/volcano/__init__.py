"""Volcano in the simulated cluster (`dev-cluster up --volcano`): `manager` runs Volcano's own scheduler and
controller manager (built from its Go module by the toolchain) and the stand-in for Huawei's Ascend plugin;
`manifests` holds their configuration and command lines; `ascend_plugin` restates the plugin's chip rules and bind
annotations as pure functions; `stand_in` is the helper process that applies them to the pods Volcano binds."""
