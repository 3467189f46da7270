"""Kubernetes, whole: the API client and its person (`client.py`: `KubeUser`), the pure manifest builders
(`manifests.py`, which kubebox uses too), the users' namespaces (`namespaces.py`), nodes and pods
(`nodes.py`, `pods.py`), reading jobs back from the API's objects (`records.py`), the scheduler itself
(`scheduler.py`: `KubernetesScheduler`) and its section of the settings (`settings.py`)."""
