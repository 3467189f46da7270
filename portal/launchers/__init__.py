"""The launchers' declarations (portal.records.launchers says what each name means): how a training program's
processes are started on each scheduler. Plain values, nothing imported: the hub reads them to validate a job."""
