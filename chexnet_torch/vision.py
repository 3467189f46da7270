"""The models, from torchvision: DenseNet-121 (CheXNet's), ResNet-50, and tinycnn (chexnet.model.tiny_cnn's twin:
three stride-2 convolutions, for checking a cluster in seconds), each with 14 outputs (logits).

torchvision's x86_64 wheels on PyPI are CUDA builds: beside a CPU build of torch (the boxes', CI's) their C++ ops
(nms, roi_align, ...) cannot load, and `import torchvision` then fails in `_meta_registrations`, which registers
fake kernels for `torchvision::nms` and `qnms` whether or not the ops loaded ("operator torchvision::nms does not
exist"). When the ops did not load, the two schemas are defined first (`_define_missing_ops`): the models import
and train; the detection ops stay unusable (calling one raises), and nothing here calls them. With matching
builds (a GPU image's CUDA torch and torchvision) the ops load and nothing is defined.
"""

from __future__ import annotations

import torch
from torch import nn

from programkit.labels import NUM_CLASSES

TINY_FILTERS = (16, 32, 64)  # as chexnet.model.TINY_FILTERS
_defined: list[object] = []  # the Library that holds the two schemas must live as long as the process


def _define_missing_ops() -> None:
    import importlib.util

    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    try:
        library = next(p for p in __import__("pathlib").Path(spec.submodule_search_locations[0]).glob("_C*.so"))
        torch.ops.load_library(str(library))
        return  # the ops load: a matching build
    except (StopIteration, OSError, RuntimeError):
        pass
    if _defined:  # once per process
        return
    lib = torch.library.Library("torchvision", "DEF")  # noqa: TOR901 - schemas only, no kernels
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _defined.append(lib)


def tiny_cnn(num_classes: int = NUM_CLASSES) -> nn.Module:
    layers: list[nn.Module] = []
    channels = 3
    for filters in TINY_FILTERS:
        layers += [nn.Conv2d(channels, filters, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(filters),
                   nn.ReLU(inplace=True)]
        channels = filters
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, num_classes))


def build_model(name: str) -> nn.Module:
    """The model `name` (programkit.reference.MODELS), randomly initialised (nothing is downloaded here)."""
    if name == "tinycnn":
        return tiny_cnn()
    _define_missing_ops()
    import torchvision

    builders = {"densenet121": torchvision.models.densenet121, "resnet50": torchvision.models.resnet50}
    if name not in builders:
        raise ValueError(f"model must be one of densenet121, resnet50, tinycnn; got {name!r}")
    return builders[name](weights=None, num_classes=NUM_CLASSES)
