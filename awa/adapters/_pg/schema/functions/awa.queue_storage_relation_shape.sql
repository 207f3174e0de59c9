-- What attaching a relation as a ring partition depends on, independent of its name: its
-- columns (name, type, NOT NULL), its indexes (method, uniqueness, keys, predicate), its
-- CHECK and key constraints (validated or not) and its storage options.
-- awa.queue_storage_install_spares builds a stand-in again when its shape differs from
-- that of the partition it stands in for.
CREATE OR REPLACE FUNCTION awa.queue_storage_relation_shape(p_rel regclass) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT concat_ws(E'\n',
        (SELECT string_agg(
                    format('%I %s%s', a.attname, format_type(a.atttypid, a.atttypmod),
                           CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END),
                    ', ' ORDER BY a.attname)
         FROM pg_attribute a
         WHERE a.attrelid = p_rel AND a.attnum > 0 AND NOT a.attisdropped),
        (SELECT string_agg(ix.shape, E'\n' ORDER BY ix.shape)
         FROM (SELECT concat_ws(' ', am.amname,
                                CASE WHEN x.indisunique THEN 'UNIQUE' END,
                                '(' || (SELECT string_agg(pg_get_indexdef(x.indexrelid, k, true),
                                                          ', ' ORDER BY k)
                                        FROM generate_series(1, x.indnatts) AS k) || ')',
                                'WHERE ' || pg_get_expr(x.indpred, x.indrelid, true)) AS shape
               FROM pg_index x
               JOIN pg_class i ON i.oid = x.indexrelid
               JOIN pg_am am ON am.oid = i.relam
               WHERE x.indrelid = p_rel) ix),
        (SELECT string_agg(d.def, E'\n' ORDER BY d.def)
         FROM (SELECT replace(pg_get_constraintdef(c.oid, true), ' NOT VALID', '') AS def
               FROM pg_constraint c
               WHERE c.conrelid = p_rel AND c.contype IN ('c', 'p', 'u', 'x')) d),
        (SELECT string_agg(o.option, ', ' ORDER BY o.option)
         FROM pg_class r, unnest(r.reloptions) AS o(option)
         WHERE r.oid = p_rel))
$$;
