"""The cluster in a box, one module per service; `python -m deploy.local.box` is the command line over them."""
