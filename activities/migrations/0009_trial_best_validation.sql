-- Each trial's best validation (by its experiment's searcher metric), kept as validations are
-- stored, so that an experiment of 10,000 trials sorts and pages its trials by that metric, and
-- finds its best trial, in SQL without reading every validation (Determined keeps
-- trials.best_validation_id for the same reason).

ALTER TABLE trials
    ADD COLUMN best_validation_id bigint REFERENCES metrics (id) ON DELETE SET NULL,
    ADD COLUMN searcher_metric_value double precision;

-- The API calls this after storing a batch that holds validations; ties go to the earlier step.
CREATE FUNCTION refresh_best_validation(trial_ids integer[]) RETURNS void
LANGUAGE sql AS $$
    UPDATE trials t SET (best_validation_id, searcher_metric_value) = (
        SELECT m.id, searcher_metric(m.metrics, e.config -> 'searcher')
        FROM metrics m
        WHERE m.trial_id = t.id AND m.metric_group = 'validation'
          AND searcher_metric(m.metrics, e.config -> 'searcher') IS NOT NULL
        ORDER BY searcher_rank(m.metrics, e.config -> 'searcher'), m.steps_completed
        LIMIT 1)
    FROM experiments e
    WHERE t.id = ANY(trial_ids) AND e.id = t.experiment_id;
$$;

SELECT refresh_best_validation(array_agg(id)) FROM trials;

CREATE INDEX trials_experiment_metric_idx ON trials (experiment_id, searcher_metric_value);
