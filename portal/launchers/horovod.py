"""Horovod's launcher: mpirun starts one process per GPU on every node (through srun's daemons on Slurm, over ssh
between a launcher pod and the node pods on Kubernetes, or as an MPIJob where the site runs the MPI Operator)."""

NAME = "horovod"
TEMPLATES = ""  # "": the portal's own, portal/records/templates/horovod.*
KUBERNETES = "portal.scheduler.kubernetes.horovodjob:horovod_job_objects"
LAUNCHER_POD = True  # on Kubernetes a single run's mpirun is a pod of its own beside the nodes' pods
