"""chexnet's declaration for the portal's registry of training programs (portal.records.programs says what each
name means). Plain values, no import of TensorFlow or of the portal: the hub reads it to validate a job."""

from programkit.reference import MODELS

NAME = "chexnet"
TITLE = "CheXNet: TensorFlow + Horovod"
DESCRIPTION = ("TensorFlow 2.15 with Horovod over MPI, one worker per GPU (the stack of Dell's 2019 study; "
               "Horovod's last release is from 2023)")
MODULE = "chexnet.train"
LAUNCHER = "horovod"
VENV = ""  # the portal's own venv (TensorFlow 2.15.1 and Horovod 0.28.1 on Python 3.11)
FIELDS = (
    {"name": "model", "kind": "choice", "choices": MODELS, "default": "densenet121", "label": "Model",
     "help": "DenseNet-121 is CheXNet's; tinycnn checks a cluster in seconds"},
    {"name": "fp16", "kind": "bool", "default": False, "label": "fp16 (mixed precision)",
     "help": "float16 compute with float32 weights (--fp16)"},
    {"name": "xla", "kind": "bool", "default": False, "label": "XLA compilation", "help": "TensorFlow's XLA (--xla)"},
)
ARGS_TEMPLATE = "args.sh"
