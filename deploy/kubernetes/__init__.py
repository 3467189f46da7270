"""Kubernetes in a box: `python -m deploy.kubernetes.kubebox` (kubebox.py) over kubeparts/, with its manifests."""
