-- The searcher metric of a validation report, and a key that sorts the best report first.
-- `searcher` is the experiment config's searcher object ({"metric": ..., "smaller_is_better": ...}).

CREATE FUNCTION searcher_metric(metrics jsonb, searcher jsonb) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN jsonb_typeof(metrics -> (searcher ->> 'metric')) = 'number'
                THEN (metrics ->> (searcher ->> 'metric'))::double precision END
$$;

CREATE FUNCTION searcher_rank(metrics jsonb, searcher jsonb) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN (searcher ->> 'smaller_is_better')::boolean IS false
                THEN -searcher_metric(metrics, searcher)
                ELSE searcher_metric(metrics, searcher) END
$$;
