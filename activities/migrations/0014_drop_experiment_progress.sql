-- An experiment's progress is computed from its trials against its plan (planned_trials, 0011)
-- whenever it is read; the stored column was written at the end and never read.
ALTER TABLE experiments DROP COLUMN progress;
