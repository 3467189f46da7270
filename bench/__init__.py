"""The benchmarks (`make bench`), outside the product: nothing in portal/, spawners/ or jupyterhub_config.py imports
them. Each prints a table of medians and ratios measured side by side in one run, saves its figures to
docs/results/<name>.json (bench.results) and exits 1 when a target is not met; docs/benchmarks_chart.py draws
docs/benchmarks.png from those files, and docs/benchmarks.md has the results.

    python -m bench.pipeline    # the tf.data input pipeline: PNG vs JPEG records, decode limits, per core and
                                #   per stage, cores per H100 (bench.pipeline_{names,rows,worker,report})
    python -m bench.parity      # AUROC of uint8 input normalised in the model vs float32 normalised on the host
    python -m bench.scaling     # Horovod workers on one machine (horovodrun)
    python -m bench.spawn       # spawning servers: the portal's Slurm spawner vs stock batchspawner (bench.stock_hub)
    python -m bench.dashboard   # the dashboard under load: latency, errors, the scheduler's calls; on the Slurm box,
                                #   or --box kubernetes (= python -m bench.dashboard_kubernetes) on the Kubernetes
                                #   box (bench.dashboard_{users,slurm,kubernetes})
    python -m bench.liveness    # submit -> first images/sec in TensorBoard; event file -> TensorBoard
    python -m bench.nodes       # the same 2-worker training on 1 node vs 2 nodes
    python -m bench.programs    # the PyTorch program against the TensorFlow one, and on 1 vs 2 hosts (Slurm box)
    python -m bench.gpu_torch   # the PyTorch program on one GPU against plain torchvision and its input pipeline
                                #   (the torch venv, on a machine with a GPU; not in `make bench`)

The hub-side ones run against a running cluster in a box (`make up`, or the one DSPORTAL_CONFIG names; `make up-k8s`
for the Kubernetes box), as root, from the repository root. bench.hub_client is the one small hub client the tests
use too.
"""
