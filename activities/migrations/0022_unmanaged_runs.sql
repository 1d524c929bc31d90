-- Detached ("unmanaged") experiments and trials: Determined's core_v2 runs a script outside
-- the cluster that creates them, reports to them and ends them; no workflow runs them. Their
-- external ids name them across runs of the script (`PUT .../by-external-id/...`).
ALTER TABLE experiments ADD COLUMN unmanaged boolean NOT NULL DEFAULT false;
ALTER TABLE experiments ADD COLUMN external_id text;
CREATE UNIQUE INDEX experiments_external_id_idx ON experiments (external_id)
    WHERE external_id IS NOT NULL;
ALTER TABLE trials ADD COLUMN external_id text;
CREATE UNIQUE INDEX trials_external_id_idx ON trials (experiment_id, external_id)
    WHERE external_id IS NOT NULL;
-- The session of the trial's owner its running run's code has (DET_USER_TOKEN), revoked when
-- another run replaces it and when the trial ends.
ALTER TABLE trials ADD COLUMN session_hash bytea;
