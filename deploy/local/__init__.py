"""The cluster in a box: `python -m deploy.local.box` (box.py) over parts/, one module per service."""
