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

TRAIN = [
    "tensorflow-cpu==2.15.1",
    "scikit-learn>=1.3",
    "matplotlib>=3.7",
    "pillow>=10",
]

setup(
    name="dsportal",
    version="0.1.0",
    description="A JupyterHub portal for training medical-imaging models with Horovod on GPU clusters",
    python_requires=">=3.11",
    packages=find_packages(include=["portal", "portal.*", "spawners", "spawners.*", "chexnet", "chexnet.*"]),
    install_requires=HUB,
    extras_require={
        # The training payload. Horovod 0.28.1 is built by deploy/local/install.sh after TensorFlow (it needs
        # --no-build-isolation and build flags); TF 2.16+ (Keras 3) breaks it. GPU images use tensorflow==2.15.1.
        "train": TRAIN,
        "test": ["pytest>=8", "requests>=2.31", "playwright>=1.45", "ruff>=0.6"],
    },
)
