-- New ready work wakes the queue's dispatchers. NOTIFY is delivered at commit and
-- duplicates within one transaction collapse, so a batch insert sends one per queue.
CREATE OR REPLACE FUNCTION awa.canonical_jobs_notify_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(awa.wake_channel(NEW.queue), '');
    RETURN NULL;
END
$$;
