"""PCOR: private contextual outlier release (seed 003, Shafieinejad et al., SIGMOD'21)."""
