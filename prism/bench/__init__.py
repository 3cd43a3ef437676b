"""The benchmark, on the host: both ends of its flow. plan.py turns
`prism bench run` into a plan (workloads x schedulers x repetitions on one
device profile), boots one VM per kernel through the host tooling
(prism.host) with the emulated drive attached (prism.drives), hands the
plan to the guest's runner (prism.guest.benchrun) and collects the raw
runs it leaves; report.py turns those raw runs into results.json,
results.csv, plots and report.md. The top layer under the command
(prism.cli): it may use every layer below it, and none uses it.
"""
