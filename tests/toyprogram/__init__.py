"""A third training program, written in tests/ with the program kit alone (no TensorFlow, no PyTorch): a linear
read-out of each image's grid of cell brightnesses, trained with Adam in NumPy. It proves that a program needs only
its own package and one registration (issue 64): the program contract suite (tests/programs) registers it
(`TOY_PROGRAM`) beside the registered programs and runs it through every test the real ones pass."""

TOY_PROGRAM = "tests.toyprogram.program"  # its declaration module: the one line that registers it
