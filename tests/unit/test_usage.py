"""GPU-hours this week from sacct (as Slurm 22.05 prints `sacct -X -P -n --duplicates -o SACCT_FIELDS`)."""

from datetime import datetime

from portal.usage import parse_usage, week_start

NOW = datetime(2026, 11, 22, 20, 0, 0)  # a Sunday
SACCT = (
    "2|alice|RUNNING|2026-11-22T19:00:00|Unknown|billing=2,cpu=2,gres/gpu=1,mem=4G,node=1|node1|spawner-jupyterhub\n"
    "3|alice|CANCELLED by 0|2026-11-22T18:00:00|2026-11-22T18:30:00|billing=1,cpu=1,gres/gpu=2,mem=1000M,node=1|"
    "node1|my | job\n"
    "4|alice|CANCELLED by 0|None|2026-11-22T19:16:09||None assigned|wrap\n"
    "5|bob|COMPLETED|2026-11-15T23:00:00|2026-11-16T01:00:00|billing=1,cpu=1,mem=1000M,node=1|node2|cpu\n"
    "6|bob|COMPLETED|2026-11-15T23:00:00|2026-11-16T01:00:00|cpu=2,gres/gpu=4,node=2|node[1-2]|chexnet\n"
)


def test_the_week_starts_on_monday_midnight():
    assert week_start(NOW) == datetime(2026, 11, 16)
    assert week_start(datetime(2026, 11, 16, 0, 0, 1)) == datetime(2026, 11, 16)


def test_gpu_hours_per_job_clipped_to_the_week_and_to_now():
    report = parse_usage(SACCT, NOW)
    by_id = {job.job_id: job for job in report.jobs}
    assert by_id["2"].gpu_hours == 1.0 and by_id["2"].kind == "server" and by_id["2"].end is None
    assert by_id["3"].gpu_hours == 1.0 and by_id["3"].name == "my | job" and by_id["3"].state == "CANCELLED"
    assert by_id["4"].gpu_hours == 0.0  # never started
    assert by_id["5"].gpu_hours == 0.0  # no GPUs
    assert by_id["6"].gpu_hours == 4.0  # 4 GPUs, of which only the hour after Monday 00:00 is this week
    assert report.per_user == {"alice": 2.0, "bob": 4.0} and report.gpu_hours == 6.0
    assert [job.job_id for job in report.jobs][:3] == ["4", "2", "3"]  # newest first (never started: by its end)
    assert report.to_dict()["per_user"] == {"alice": 2.0, "bob": 4.0}
