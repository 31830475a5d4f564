-- Helpers shared by the pg_regress tests in sql/; each test includes this
-- file with \i.  Temporary functions: they vanish with the test's session.

-- try(sql): run one statement; its first value as text, or
-- "ERROR <sqlstate>: <message>" if it fails.
CREATE FUNCTION pg_temp.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    result text;
    state text;
    msg text;
BEGIN
    EXECUTE sql INTO result;
    RETURN coalesce(result, '(null)');
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
    RETURN format('ERROR %s: %s', state, msg);
END $$;

-- try_with_detail(sql): as try(), with the error's DETAIL in brackets.
CREATE FUNCTION pg_temp.try_with_detail(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    result text;
    state text;
    msg text;
    detail text;
BEGIN
    EXECUTE sql INTO result;
    RETURN coalesce(result, '(null)');
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                            detail = PG_EXCEPTION_DETAIL;
    RETURN format('ERROR %s: %s', state, msg) || coalesce(' (' || nullif(detail, '') || ')', '');
END $$;

-- wait_until_expired(name): return once the server clock has passed the
-- lease's expires_at; raise if that takes more than 5 seconds.
CREATE FUNCTION pg_temp.wait_until_expired(lease text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + interval '5 seconds';
BEGIN
    LOOP
        EXIT WHEN clock_timestamp() >
                  (SELECT expires_at FROM leader_election.leases WHERE name = lease);
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'lease "%" did not expire within 5 seconds', lease;
        END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
END $$;
