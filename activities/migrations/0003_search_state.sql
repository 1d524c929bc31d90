-- Where each trial stands in an adaptive search (ASHA): its rung and what the searcher decided,
-- and the validation length at which the searcher wants to hear from it next (the API signals
-- the experiment only for validations at or past `search_length`).

ALTER TABLE trials
    ADD COLUMN search_length bigint,
    ADD COLUMN rung integer,
    ADD COLUMN search_status text;
