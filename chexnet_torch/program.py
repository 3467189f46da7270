"""chexnet_torch's declaration for the portal's registry of training programs (portal.records.programs says
what each name means). Plain values, no import of torch or of the portal: the hub reads it to validate a job."""

from programkit.reference import MODELS

NAME = "chexnet-torch"
TITLE = "CheXNet: PyTorch DDP"
DESCRIPTION = ("PyTorch with DistributedDataParallel, started by torchrun (gloo on CPUs, NCCL on GPUs), "
               "torchvision's models; its own current stack")
MODULE = "chexnet_torch.train"
LAUNCHER = "torchrun"
VENV = "torch-venv"  # beside the portal's venv: /opt/dsportal/torch-venv (deploy/local/install-torch.sh, the image)
FIELDS = (
    {"name": "model", "kind": "choice", "choices": MODELS, "default": "densenet121", "label": "Model",
     "help": "torchvision's DenseNet-121 is CheXNet's; tinycnn checks a cluster in seconds"},
    {"name": "amp", "kind": "choice", "choices": ("auto", "off", "bf16", "fp16"), "default": "auto",
     "label": "Mixed precision", "help": "autocast on a GPU; auto: bf16 where the GPU has it, off on CPUs"},
    {"name": "channels_last", "kind": "choice", "choices": ("auto", "on", "off"), "default": "auto",
     "label": "Channels last", "help": "the memory layout on a GPU; auto: on with a GPU, off on CPUs"},
)
ARGS_TEMPLATE = "args.sh"
