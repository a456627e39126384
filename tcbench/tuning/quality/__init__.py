"""Time to quality (in progress, issue 38): does a candidate (compiled, at a bigger batch, with its learning rate)
reach a held-out target loss sooner and cheaper than the native reference? ``scoring`` holds how its runs are
scored (MLPerf's olympic mean, paired ratios over seeds); the study that runs the candidates is not built yet."""
