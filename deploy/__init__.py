"""The two boxes (the Slurm cluster and Kubernetes, each in a box) and what they share; run with `python -m`."""
