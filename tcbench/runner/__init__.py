"""Running one job: preflight checks, the runner (spawn, wait, stop, write as records arrive)."""
