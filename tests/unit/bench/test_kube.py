"""bench.kube's pure parts: the training figures from a run's TensorBoard points; bench.kube_report's figures,
targets, verdicts and table; bench.kube_timeline's stages of a spawn."""

from __future__ import annotations

import pytest

from bench import kube_timeline
from bench.kube import training_figures
from bench.kube_report import figures, ratio, table, targets, verdicts


def test_training_figures_come_from_the_points_wall_times():
    submitted = 1000.0
    loss = [(1, 1040.0, 0.5), (2, 1052.0, 0.4), (3, 1066.0, 0.3)]  # epoch 1 holds TensorFlow's start
    rates = [(1, 1040.0, 30.0), (2, 1052.0, 34.0), (3, 1066.0, 32.0)]
    figures = training_figures(submitted, rates, loss)
    assert figures["first_point_s"] == 40.0
    assert figures["epoch_s_all"] == [12.0, 14.0] and figures["epoch_s"] == 13.0
    assert figures["images_per_sec"] == 32.0
    assert training_figures(submitted, [], [])["first_point_s"] is None


SPAWN_STAGES = {"pod": 0.3, "scheduled": 0.1, "running": 1.5, "listening": 1.2, "ready": 0.4, "page": 0.1}
STOCK_STAGES = {"pod": 0.2, "scheduled": 0.1, "running": 0.6, "listening": 1.9, "ready": 0.6, "page": 0.1}


def test_the_table_gives_kubernetes_over_slurm_and_says_what_is_missing():
    spawn = {"runs": {"portal": [10.0, 12.0, 11.0], "stock": [20.0, 22.0, 21.0]}}
    training = {"slurm": {"first_point_s": 50.0, "epoch_s": 10.0, "images_per_sec": 30.0},
                "kubernetes": {"first_point_s": 60.0, "epoch_s": 12.0, "images_per_sec": None}}
    lines = table(figures(spawn, training)).splitlines()
    assert "median" in lines[2] and lines[2].split()[-3:] == ["11.00", "21.00", "0.52"]
    assert lines[-3].split()[-3:] == ["50.00", "60.00", "1.20"]
    assert lines[-1].endswith("n/a")
    assert ratio(None, 1.0) is None and ratio(2.0, 0) is None and ratio(3.0, 2.0) == pytest.approx(1.5)


def test_each_target_is_a_ratio_measured_side_by_side_and_one_not_met_names_its_stages():
    spawn = {"runs": {"portal": [3.0, 3.2, 3.4, 5.0], "stock": [3.6, 3.7, 3.8, 4.0]},
             "stages": {"portal": [SPAWN_STAGES] * 4, "stock": [STOCK_STAGES] * 4}}
    training = {"slurm": {"first_point_s": 30.0, "epoch_s": 10.0, "images_per_sec": 30.0,
                          "stages": {"queue": 1.0, "framework": 3.0, "first step": 16.0}},
                "kubernetes": {"first_point_s": 31.0, "epoch_s": 10.5, "images_per_sec": 29.0,
                               "stages": {"queue": 3.0, "workers": 2.0, "framework": 3.5, "first step": 15.0}}}
    data = figures(spawn, training)
    found = {t.name: t for t in targets(data)}
    median = found["spawn on Kubernetes, median ours / stock KubeSpawner"]
    assert median.measured == pytest.approx(3.3 / 3.75) and not median.met and median.target == "<= 0.7"
    assert not found["spawn on Kubernetes, p90 ours / stock KubeSpawner"].met  # ours has the slow tail
    assert found["same job, first point Kubernetes / Slurm"].met
    assert found["same job, images/s Kubernetes / Slurm"].met  # 0.967
    lines = verdicts(list(found.values()))
    assert "NOT met; ours is slower in: running +0.90 s, pod +0.10 s" in lines[0]
    assert "its largest stages: running 1.5 s, listening 1.2 s, ready 0.4 s" in lines[0]
    assert lines[2].endswith(": met")
    training["kubernetes"]["first_point_s"] = 40.0
    data = figures(spawn, training)
    line = verdicts(targets(data))[2]
    assert "NOT met; Kubernetes is slower in: queue +2.00 s, framework +0.50 s" in line


def test_a_spawn_is_cut_into_stages_from_the_pods_changes_and_its_log():
    pod = {"metadata": {"name": "jupyter-alice"}, "spec": {}, "status": {}}
    assert kube_timeline.pod_changes(pod) == {"pod"}
    pod["spec"]["nodeName"] = "kube-node1"
    pod["status"]["containerStatuses"] = [{"state": {"waiting": {"reason": "ContainerCreating"}}}]
    assert kube_timeline.pod_changes(pod) == {"pod", "scheduled"}
    pod["status"]["containerStatuses"] = [{"state": {"running": {"startedAt": "x"}}}]
    assert kube_timeline.pod_changes(pod) == {"pod", "scheduled", "running"}
    log = ("2026-11-28T08:00:01.250000000Z [I 2026-11-28 08:00:01.249 ServerApp] starting\n"
           "2026-11-28T08:00:02.500123456Z [I 2026-11-28 08:00:02.499 ServerApp] Jupyter Server is running at:\n")
    listening = kube_timeline.first_listening(log)
    assert listening == pytest.approx(kube_timeline.log_time("2026-11-28T08:00:02.500123Z x"), abs=1e-6)
    assert kube_timeline.log_time("not a stamp") is None and kube_timeline.first_listening("no line") is None
    seen = {"pod": 100.3, "scheduled": 100.4, "running": 101.9}
    found = kube_timeline.stages(100.0, seen, 103.1, 103.5, 103.6)
    assert found == pytest.approx({"pod": 0.3, "scheduled": 0.1, "running": 1.5, "listening": 1.2, "ready": 0.4,
                                   "page": 0.1})
    assert kube_timeline.stages(100.0, {"pod": 100.3}, None, 103.5, 103.6)["listening"] is None


def test_pairs_of_jobs_give_the_median_ratio_and_the_median_pairs_figures():
    def job(first_point: float, rate: float) -> dict:
        return {"first_point_s": first_point, "epoch_s": 100.0 / rate, "images_per_sec": rate}

    pairs = [{"first": "slurm", "slurm": job(60.0, 50.0), "kubernetes": job(63.0, 46.5)},  # 0.93
             {"first": "kubernetes", "slurm": job(61.0, 50.0), "kubernetes": job(62.0, 50.0)},  # 1.00
             {"first": "slurm", "slurm": job(59.0, 50.0), "kubernetes": job(70.0, 48.5)}]  # 0.97
    data = figures(None, {"pairs": pairs})
    training = data["training"]
    assert training["ratios_kubernetes_over_slurm"]["images_per_sec"] == pytest.approx(0.97)
    assert training["ratios_kubernetes_over_slurm"]["first_point_s"] == pytest.approx(63.0 / 60.0)
    assert training["kubernetes"] is pairs[2]["kubernetes"]  # the pair of the median images/s ratio
    found = {t.name: t for t in targets(data)}
    assert found["same job, images/s Kubernetes / Slurm"].met
    lines = table(data).splitlines()
    assert any(line.startswith("pair 2 (kubernetes first): K/S first_point_s 1.02") for line in lines), lines
    assert any(line.startswith("median of the pairs: K/S") and "images_per_sec 0.97" in line for line in lines)
