"""The bottom layer of the hub side: a job's record (`job.json`) and its spec, a sweep's plan, the job-id formats,
the job templates' values, the GPU quota rule and acting as the user who owns them. Imports nothing of a scheduler:
the schedulers, the dashboard, the notebooks and the spawners build on it (docs/architecture.md)."""
