"""CheXNet in PyTorch: DistributedDataParallel under torchrun, beside the TensorFlow + Horovod program (chexnet/)."""
