-- The preemption long-polls (api/preemption.py) wait for this notification instead of reading
-- the trial's row four times a second: a change of `preempt_requested` (pause, cancel, a stop
-- by the searcher) or of `run_id` (a newer run makes the old one stale) notifies channel
-- `trial_preemption` with the trial's id, delivered when the writing transaction commits.
CREATE FUNCTION notify_trial_preemption() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('trial_preemption', NEW.id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER trial_preemption_changed
    AFTER UPDATE OF preempt_requested, run_id ON trials
    FOR EACH ROW
    WHEN (OLD.preempt_requested IS DISTINCT FROM NEW.preempt_requested
          OR OLD.run_id IS DISTINCT FROM NEW.run_id)
    EXECUTE FUNCTION notify_trial_preemption();
