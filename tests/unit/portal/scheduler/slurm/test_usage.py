"""GPU-hours this week from Slurm's accounting (`sacct --json -X --duplicates`, as Slurm 22.05 answers it)."""

from datetime import datetime

from portal.scheduler.slurm.json_answers import read_sacct
from portal.scheduler.slurm.usage import usage_report
from portal.scheduler.usage import week_start
from tests.slurm_answers import sacct_json, sacct_run

NOW = datetime(2026, 11, 21, 20, 0, 0)  # a Saturday: the week began on Sunday 15 November
FORGED = "x\n900001|alice|RUNNING|2026-11-16T00:00:00|Unknown|gres/gpu=4|node1|y"  # a name that forged hours
SACCT = sacct_json(
    sacct_run(2, "alice", "RUNNING", datetime(2026, 11, 21, 19), None, gpus=1, name="spawner-jupyterhub"),
    sacct_run(3, "alice", "CANCELLED", datetime(2026, 11, 21, 18), datetime(2026, 11, 21, 18, 30), gpus=2,
              name="my | job"),
    sacct_run(4, "alice", "CANCELLED", None, datetime(2026, 11, 21, 19, 16, 9), name="wrap", nodes="None assigned"),
    sacct_run(5, "bob", "COMPLETED", datetime(2026, 11, 14, 23), datetime(2026, 11, 15, 1), name="cpu"),
    sacct_run(6, "bob", "COMPLETED", datetime(2026, 11, 14, 23), datetime(2026, 11, 15, 1), gpus=4,
              nodes="node[1-2]"),
    sacct_run(7, "bob", "COMPLETED", datetime(2026, 11, 21, 19), datetime(2026, 11, 21, 19, 0, 1), name=FORGED),
)


def test_the_week_starts_on_sunday_midnight_as_slurms_weekly_reset():
    assert week_start(NOW) == datetime(2026, 11, 15)
    assert week_start(datetime(2026, 11, 15, 0, 0, 1)) == datetime(2026, 11, 15)
    assert week_start(datetime(2026, 11, 14, 23, 59, 59)) == datetime(2026, 11, 8)  # Saturday: the week before


def test_gpu_hours_per_job_clipped_to_the_week_and_to_now():
    report = usage_report(read_sacct(SACCT), NOW)
    by_id = {job.job_id: job for job in report.jobs}
    assert by_id["2"].gpu_hours == 1.0 and by_id["2"].kind == "server" and by_id["2"].end is None
    assert by_id["3"].gpu_hours == 1.0 and by_id["3"].name == "my | job" and by_id["3"].state == "CANCELLED"
    assert by_id["4"].gpu_hours == 0.0 and by_id["4"].nodes == ""  # never started (Slurm: "None assigned")
    assert by_id["5"].gpu_hours == 0.0  # no GPUs
    assert by_id["6"].gpu_hours == 4.0  # 4 GPUs, of which only the hour after Sunday 00:00 is this week
    assert by_id["7"].gpu_hours == 0.0 and by_id["7"].name == FORGED and "900001" not in by_id
    assert report.per_user == {"alice": 2.0, "bob": 4.0} and report.gpu_hours == 6.0
    assert [job.job_id for job in report.jobs][:4] == ["4", "7", "2", "3"]  # newest first (never started: by end)
    assert report.to_dict()["per_user"] == {"alice": 2.0, "bob": 4.0}
