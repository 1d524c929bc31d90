-- How long a trial's logs are kept after it ends (`det trial|experiment set log-retention`):
-- days, -1 for ever, NULL for the experiment's setting, else the cluster's default
-- (EPOCHAL_LOG_RETENTION_DAYS). The master deletes expired lines (activities/log_retention.py).
ALTER TABLE experiments ADD COLUMN log_retention_days smallint
    CHECK (log_retention_days BETWEEN -1 AND 32767);
ALTER TABLE trials ADD COLUMN log_retention_days smallint
    CHECK (log_retention_days BETWEEN -1 AND 32767);
-- Finding ended trials whose logs may have expired.
CREATE INDEX trials_end_time_idx ON trials (end_time) WHERE end_time IS NOT NULL;

-- A trial's lines are read in the order they were produced (their timestamp, then the order
-- they arrived in), not only in the order their batches arrived (api/log_stream.py).
CREATE INDEX task_logs_trial_time_idx ON task_logs (trial_id, timestamp, id);
