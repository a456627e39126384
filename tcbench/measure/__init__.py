"""Pure functions from records to figures: steady state, intervals, verdicts, break-even, warnings, loss parity."""
