"""The Kubernetes box's parts: its layout, identities, the client calls it makes, one module per service, bootstrap."""
