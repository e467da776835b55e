"""Running analyses unattended: results records, papermill runs and sweeps."""
