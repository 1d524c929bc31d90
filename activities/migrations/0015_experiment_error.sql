-- Why an experiment ended in ERROR when none of its trials says so (its searcher's sampler
-- failed); NULL otherwise.
ALTER TABLE experiments ADD COLUMN error text;
