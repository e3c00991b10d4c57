"""The fitness service: workloads, the sandboxed runner, correctness and timing protocols."""
