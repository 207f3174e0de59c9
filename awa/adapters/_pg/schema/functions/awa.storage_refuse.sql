-- Refusals carry SQLSTATE 55000 and a message starting with the gate's name.
CREATE OR REPLACE FUNCTION awa.storage_refuse(p_gate text, p_detail text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'storage transition refused by gate %: %', p_gate, p_detail
        USING ERRCODE = 'object_not_in_prerequisite_state', HINT = p_gate;
END
$$;
