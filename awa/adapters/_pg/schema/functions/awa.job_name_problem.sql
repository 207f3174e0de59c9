-- Why a kind or queue name cannot be used, or NULL: the rule of
-- awa.domain.validation.name_problem (one rule; a test compares the two over every code
-- point). Both: no control, format or bidirectional characters (UNPRINTABLE_RANGES), not
-- blank, no space at either end (SPACE_RANGES). Queue names also: no '/' (it splits the
-- admin UI's and REST API's URL paths), no '#' (it names a stripe, queue#N), not '.'
-- or '..'.
CREATE OR REPLACE FUNCTION awa.job_name_problem(p_field text, p_name text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    -- One expression, planned once per session (a SQL function called from PL/pgSQL
    -- was planned again in every transaction: 54 us of each insert, twice).
    RETURN CASE
            WHEN p_name IS NULL THEN NULL
            WHEN p_name ~ '[\u0001-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]' THEN format(
                '%s must not contain control, format or bidirectional characters (found U+%s): '
                'such a name does not print as itself',
                p_field,
                upper(lpad(to_hex(ascii(substring(p_name FROM '[\u0001-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]'))), 4, '0')))
            WHEN p_name ~ '^[\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]*$' THEN p_field || ' must not be blank'
            WHEN p_name ~ '^[\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]|[\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]$' THEN p_field || ' must not begin or end with a space'
            WHEN p_field = 'queue' AND strpos(p_name, '/') > 0
                THEN 'queue must not contain ''/'': it splits URL paths'
            WHEN p_field = 'queue' AND strpos(p_name, '#') > 0
                THEN 'queue must not contain ''#'': it names a stripe (queue#N)'
            WHEN p_field = 'queue' AND p_name IN ('.', '..')
                THEN format('queue must not be %L: a URL path cannot carry it', p_name)
        END;
END
$$;
