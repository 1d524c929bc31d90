-- Metric reads. The unique key (trial_id, metric_group, steps_completed) already serves one
-- trial's series and step ranges. The experiment list and detail look for each experiment's
-- best validation among its trials' validation reports; this partial index finds a trial's
-- validations without visiting its (far more numerous) training reports.

CREATE INDEX metrics_validation_idx ON metrics (trial_id, steps_completed)
    WHERE metric_group = 'validation';
