"""The toy launcher's declaration (portal.records.launchers says what each name means): one process per node,
started by srun, its rank in RANK; no rendezvous (the toy trains on rank 0 alone). Its job scripts are in
templates/ beside it; on Kubernetes its builder is kube.py's (the record Job's pod is rank 0, a workers Job's the rest).
"""

NAME = "toyrun"
TEMPLATES = "templates"
KUBERNETES = ".kube:toy_job_objects"  # kube.py beside it
LAUNCHER_POD = False
