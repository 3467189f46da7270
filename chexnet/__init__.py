"""CheXNet on Horovod: the training payload the portal's templates launch on compute nodes.

Runs as a program (`python -m chexnet.train ...`); imports nothing of the hub side (`portal`, `spawners`).
"""
