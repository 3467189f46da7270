"""The cluster in a box, one module per service; deploy/local/box.py is the command line that composes them."""
