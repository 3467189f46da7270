"""A third training program, written in tests/ with the program kit alone (no TensorFlow, no PyTorch): a linear
read-out of each image's grid of cell brightnesses, trained with Adam in NumPy. It proves that a program needs only
its own package and one registration (issue 64): the program contract suite (tests/programs) registers it
(`TOY_PROGRAM`) beside the registered programs and runs it through every test the real ones pass, and the test boxes
register it as a site's own program, with its own launcher (launcher.py: srun on Slurm, kube.py on Kubernetes), by
their settings alone (tests/conftest.py: a copy named `toyprogram` in a directory every user reads)."""

TOY_PROGRAM = "tests.toyprogram.program"  # its declaration module: the one line that registers it
