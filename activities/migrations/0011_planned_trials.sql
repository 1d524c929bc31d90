-- How many trials an experiment's searcher will run in all (the grid's points, max_trials, or
-- one), written when it is created: its progress is its trials' progress against this plan,
-- so it only grows and keeps its value when the experiment is canceled. Older grid searches
-- (no max_trials in their config) keep NULL and are measured against the trials they have.

ALTER TABLE experiments ADD COLUMN planned_trials integer;

UPDATE experiments SET planned_trials = CASE config -> 'searcher' ->> 'name'
    WHEN 'single' THEN 1
    ELSE (config -> 'searcher' ->> 'max_trials')::integer END;
