"""A Horovod job on Kubernetes keeps a worker that was only slow to answer: the launcher takes a worker for lost
only when its sshd fails to answer twice in a row (horovod-k8s-watch.sh), and a worker publishes its address again
whenever the launcher removed it (horovod-k8s-serve.sh), so a worker taken for lost costs a resume, not the job.
Before, one ssh answer slower than 10 s (the box loaded by another user's work) removed a live worker's file for
good and the job waited "1 of 2 ready" until its time limit. The scripts run here under bash with a stub ssh."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from portal.records.templating import template_environment
from portal.scheduler.kubernetes.horovodjob import PROBE_AGAIN_S, SERVE_POLL_S, plain_job_objects
from tests.conftest import wait_for
from tests.unit.helpers import K8S_CFG, K8S_JOB_ID, bash_syntax_ok, k8s_spec

WORKER = ("198.18.4.7", "k8s-7-workers-abc")

STUB_SSH = """#!/bin/bash
# The job's ssh, stubbed: each call takes the next answer from $ANSWERS ("ok": the worker's hostname; "slow":
# nothing, as a timed-out ssh) and logs the address it was asked.
echo "$1" >> "$ANSWERS.asked"
answer=$(head -n 1 "$ANSWERS"); sed -i 1d "$ANSWERS"
[ "$answer" = ok ] && echo {name}
[ "$answer" = ok ]
"""


def launcher_watch(tmp_path: Path, answers: list[str]) -> tuple[str, Path]:
    """lost_workers run once on one worker of the run, with ssh answering `answers` in turn: (stdout, job dir)."""
    job_dir, bin_dir = tmp_path / "job", tmp_path / "bin"
    (job_dir / "workers").mkdir(parents=True)
    bin_dir.mkdir()
    (job_dir / "workers" / WORKER[1]).write_text(" ".join(WORKER) + "\n")
    (job_dir / "hosts.ready").write_text(f"{WORKER[0]} {WORKER[1]} {WORKER[1]}\n")
    (bin_dir / "ssh").write_text(STUB_SSH.format(name=WORKER[1]))
    (bin_dir / "ssh").chmod(0o755)
    (tmp_path / "answers").write_text("".join(f"{a}\n" for a in answers))
    text = template_environment().get_template("horovod-k8s-watch.sh").render(probe_again_s=0.1)
    script = f'job_dir={str(job_dir)!r}; ssh_probe=ssh\n{text}\nlost_workers\n'
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ANSWERS": str(tmp_path / "answers")}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, env=env, check=True)
    return done.stdout.strip(), job_dir


def test_a_worker_slow_to_answer_once_is_not_lost(tmp_path):
    lost, job_dir = launcher_watch(tmp_path, ["slow", "ok"])
    assert lost == "0" and (job_dir / "workers" / WORKER[1]).exists()
    assert (tmp_path / "answers.asked").read_text().split() == [WORKER[0]] * 2  # asked again, the same address


def test_a_worker_silent_twice_in_a_row_is_lost_and_its_file_removed(tmp_path):
    lost, job_dir = launcher_watch(tmp_path, ["slow", "slow", "ok"])
    assert lost == "1" and not (job_dir / "workers" / WORKER[1]).exists()


def test_a_worker_answering_at_once_is_asked_once(tmp_path):
    lost, _ = launcher_watch(tmp_path, ["ok"])
    assert lost == "0" and (tmp_path / "answers.asked").read_text().split() == [WORKER[0]]


def worker_serving(tmp_path: Path, sshd: str) -> tuple[str, dict[str, str], Path]:
    """The worker's loop (horovod-k8s-serve.sh) behind `sshd` (a command that stands for it, in the background):
    (the script, its environment, its published file)."""
    job_dir = tmp_path / "job"
    (job_dir / "workers").mkdir(parents=True)
    text = template_environment().get_template("horovod-k8s-serve.sh").render(serve_poll_s=0.1)
    script = f'job_dir={str(job_dir)!r}\n{text}\n{sshd} & sshd=$!\npublish || exit 9\nserve "$sshd"\n'
    return script, {**os.environ, "POD_IP": WORKER[0], "POD_NAME": WORKER[1]}, job_dir / "workers" / WORKER[1]


def test_a_worker_publishes_again_whenever_taken_for_lost_and_ends_with_the_job(tmp_path):
    script, env, published = worker_serving(tmp_path, "sleep 300")
    with subprocess.Popen(["bash", "-c", script], env=env, stdout=subprocess.PIPE, text=True) as worker:
        try:
            wait_for(published.exists, 10, interval=0.05, what="the worker's first publication")
            assert published.read_text().split()[0] == WORKER[0]
            for _ in range(2):  # removed by the launcher (horovod-k8s-watch.sh): written again, every time
                published.unlink()
                wait_for(published.exists, 10, interval=0.05, what="the worker's address published again")
            (published.parent.parent / "workers-done").touch()
            assert worker.wait(timeout=10) == 0
            assert not published.exists() and "published again" in worker.stdout.read()
        finally:
            worker.kill()


def test_a_worker_whose_sshd_died_fails(tmp_path):
    script, env, _ = worker_serving(tmp_path, "sleep 0.3")
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "sshd exited" in done.stderr


def test_the_job_scripts_use_both_with_the_sites_pauses():
    launcher, (_, workers) = plain_job_objects(k8s_spec(nodes=2), K8S_JOB_ID, "alice", K8S_CFG, "v100",
                                               private_key="KEY", public_key="ssh-ed25519 AAAA dsportal-job\n")
    launch = launcher["spec"]["template"]["spec"]["containers"][0]["command"][2]
    work = workers["spec"]["template"]["spec"]["containers"][0]["command"][2]
    bash_syntax_ok(launch)
    bash_syntax_ok(work)
    assert f"sleep {PROBE_AGAIN_S}\n" in launch and "lost=$(lost_workers)" in launch
    assert f"sleep {SERVE_POLL_S}\n" in work and 'serve "$sshd"' in work and "publish || exit 1" in work
