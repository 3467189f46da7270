"""The Data Scientist Portal: JupyterHub + LDAP + Slurm/Kubernetes spawners + Horovod CheXNet templates."""

from setuptools import find_packages, setup

HUB = [
    "jupyterhub==6.1.1",
    "batchspawner==1.3.0",
    "jupyterhub-ldapauthenticator==2.0.2",
    "jupyterhub-idle-culler==2.0.0",
    "jupyterlab==4.6.6",
    "jupyter_server==2.21.1",
    "pyyaml>=6",
]

setup(
    name="dsportal",
    version="0.1.0",
    description="A JupyterHub portal for training medical-imaging models with Horovod on GPU clusters",
    python_requires=">=3.11",
    packages=find_packages(include=["portal", "portal.*", "spawners", "spawners.*"]),
    install_requires=HUB,
    extras_require={
        "test": ["pytest>=8", "requests>=2.31", "playwright>=1.45", "ruff>=0.6"],
    },
)
