-- An experiment's best trial: the one whose best validation (trials.searcher_metric_value,
-- kept by refresh_best_validation) ranks first by the searcher's metric, ties to the lower id.
-- The one rule the API's answers, finish_experiment and Determined's
-- best_searcher_validation_metric route all use.
CREATE FUNCTION best_trial(of_experiment integer) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT t.id
    FROM trials t JOIN experiments e ON e.id = t.experiment_id
    WHERE t.experiment_id = of_experiment AND t.searcher_metric_value IS NOT NULL
    ORDER BY CASE WHEN (e.config -> 'searcher' ->> 'smaller_is_better')::boolean IS false
                  THEN -t.searcher_metric_value ELSE t.searcher_metric_value END, t.id
    LIMIT 1
$$;
