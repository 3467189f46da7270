"""Slurm, whole: its commands (`commands.py`), its answers' readers (`answers.py` for scontrol's and squeue's text,
`json_answers.py` for `squeue --json` and `sacct --json`), accounting and usage (`accounts.py`, `usage.py`,
`history.py`), the batch scripts (`sbatch.py`), the scheduler itself (`scheduler.py`: `SlurmScheduler`) and its
section of the settings (`settings.py`)."""
