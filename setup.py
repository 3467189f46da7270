"""The Data Scientist Portal: JupyterHub + LDAP + Slurm/Kubernetes spawners + Horovod CheXNet templates."""

from glob import glob

from setuptools import find_packages, setup

HUB = [
    "jupyterhub==6.1.1",
    "batchspawner==1.3.0",
    "jupyterhub-ldapauthenticator==2.0.2",
    "jupyterhub-idle-culler==2.0.0",
    "jupyterlab==4.6.6",
    "jupyter_server==2.21.1",
    "pyyaml>=6",
    # The template notebooks: TensorBoard behind the server's proxy, forms and progress bars, headless runs.
    "jupyter-server-proxy==4.6.0",
    "ipywidgets>=8.1",
    "papermill>=2.6",
    "nbclient>=0.10",
    # MLflow's client (docs/mlflow.md): the dashboard makes each user's MLflow account, rank 0 of a job logs its
    # run, a notebook queries one's runs. The server (the whole of mlflow) has a venv of its own.
    "mlflow-skinny==3.17.2",
]

TRAIN = [
    "tensorflow-cpu==2.15.1",
    "scikit-learn>=1.3",
    "matplotlib>=3.7",
    "pillow>=10",
    # Sweeps (programkit.sweep): the search and the early stopping, its journal storage on the shared home.
    "optuna==5.0.0",
]

K8S = [
    "jupyterhub-kubespawner==7.1.0",
    "kubernetes==37.0.2",
]

setup(
    name="dsportal",
    version="0.1.0",
    description="A JupyterHub portal for training medical-imaging models with Horovod on GPU clusters",
    python_requires=">=3.11",
    # programkit: what every training program shares, below the programs and the hub (docs/architecture.md).
    packages=find_packages(include=["portal", "portal.*", "spawners", "spawners.*", "programkit", "programkit.*",
                                    "chexnet", "chexnet.*", "chexnet_torch", "chexnet_torch.*"]),
    # Job scripts and the dashboard's HTML travel inside the packages; the template notebooks users copy go to
    # <prefix>/share/dsportal/notebooks (portal.templates.templates_dir() finds them there or in a source tree).
    package_data={"portal": ["icons/*.svg", "proxy_hsts.js"], "portal.records": ["templates/*"],
                  # Each training program's argument fragment for the job scripts (portal.records.programs).
                  "chexnet": ["templates/*"], "chexnet_torch": ["templates/*"],
                  "portal.service": ["templates/*.html", "hub_templates/*.html", "static/*"]},
    # JupyterLab reads <prefix>/share/jupyter/lab/settings/overrides.d/*.json as its setting defaults (no news prompt),
    # and loads the prebuilt extensions in <prefix>/share/jupyter/labextensions/ (the idle-GPU notice: docs/gpus.md).
    data_files=[("share/dsportal/notebooks", sorted(glob("notebooks/*.ipynb"))),
                ("share/jupyter/lab/settings/overrides.d", ["deploy/jupyterlab/dsportal.json"]),
                ("share/jupyter/labextensions/dsportal-gpu-notice", ["deploy/jupyterlab/gpu-notice/package.json"]),
                ("share/jupyter/labextensions/dsportal-gpu-notice/static",
                 ["deploy/jupyterlab/gpu-notice/static/remoteEntry.js"])],
    install_requires=HUB,
    extras_require={
        # The training payload. Horovod 0.28.1 is built by deploy/local/install.sh after TensorFlow (it needs
        # --no-build-isolation and build flags); TF 2.16+ (Keras 3) breaks it. GPU images use tensorflow==2.15.1.
        "train": TRAIN,
        # The Kubernetes path (spawner_backend: kubernetes): KubeSpawner for servers, the client for MPIJobs.
        "k8s": K8S,
        # pytest-xdist: `make test` runs the unit tests on both cores.
        "test": ["pytest>=8", "pytest-xdist>=3.5", "hypothesis>=6.100", "requests>=2.31", "playwright>=1.45",
                 "ruff>=0.6", "kubernetes-validate==1.37.0"],
    },
    entry_points={
        # The servers' launchers, after a start-time fix (spawners/singleuser.py): the Slurm spawner's
        # (batchspawner-singleuser) and the Kubernetes spawner's (jupyterhub-singleuser).
        "console_scripts": ["dsportal-singleuser = spawners.singleuser:singleuser_main",
                            "dsportal-jupyterhub-singleuser = spawners.singleuser:jupyterhub_singleuser_main"],
        # Every JupyterLab server runs TensorBoard over ~/jobs at <server>/tensorboard/, with a launcher icon.
        # ... and a "Portal" card that opens the dashboard in a new browser tab (nothing proxied, nothing started).
        "jupyter_serverproxy_servers": ["tensorboard = portal.notebook:tensorboard_proxy",
                                        "portal = portal.notebook:portal_launcher"],
    },
)
