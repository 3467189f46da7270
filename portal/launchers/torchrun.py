"""torchrun's launcher: one torchrun per node starts that node's processes; the nodes meet in a FileStore in the
job's directory (never on a port another user could reach)."""

NAME = "torchrun"
TEMPLATES = ""  # "": the portal's own, portal/records/templates/torchrun.*
KUBERNETES = "portal.scheduler.kubernetes.torchjob:torchrun_job_objects"
LAUNCHER_POD = False  # node 0's pod both trains and hosts the rendezvous' directory
