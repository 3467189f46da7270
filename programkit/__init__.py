"""The program kit: what every training program writes and the hub reads, below both (docs/architecture.md).

The programs (chexnet, chexnet_torch) and the hub import it; it imports neither, and nothing of TensorFlow or torch.
"""
