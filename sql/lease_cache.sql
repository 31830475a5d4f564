--
-- lease_cache: answers always reflect what other sessions have committed,
-- however the table was changed (src/lease_cache.c, invariant C1).
--
-- The other session is a dblink connection: each dblink_exec() commits
-- there before it returns, and the very next answer here must show it.
-- With the library preloaded (as test/all.sh runs this suite) answers come
-- from the shared lease cache, so this checks that every kind of change
-- reaches it; without preloading they read the table and the expected
-- output is the same.
--
\set ECHO none
\i test/regress_helpers.sql
\set ECHO all
CREATE EXTENSION dblink;
TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
RESET leader_election.holder_id;

SELECT dblink_connect('other',
    format('dbname=%s port=%s host=%s', current_database(),
           current_setting('port'),
           split_part(current_setting('unix_socket_directories'), ',', 1)));
-- other(sql): run sql in the other session (its own transaction); a SELECT's
-- one value, or the status of the last command.
CREATE FUNCTION pg_temp.other(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    IF sql ~* '^\s*select' THEN
        SELECT t.r INTO result FROM dblink('other', sql) AS t(r text);
        RETURN result;
    END IF;
    RETURN dblink_exec('other', sql);
END $$;
-- answers(name): what this session is told about name for holders a and b.
CREATE FUNCTION pg_temp.answers(lease text) RETURNS text LANGUAGE sql AS $$
    SELECT format('a:%s/%s b:%s/%s',
                  am_leader(lease, 'a'), coalesce(leader_term(lease, 'a')::text, '-'),
                  am_leader(lease, 'b'), coalesce(leader_term(lease, 'b')::text, '-'))
$$;

--
-- Changes made through the functions in another session.
--
SELECT pg_temp.answers('n1');                       -- nobody yet
SELECT pg_temp.other($$SELECT try_acquire_leader('n1', '1 hour', 'a')$$);
SELECT pg_temp.answers('n1');                       -- a, term 1
SELECT pg_temp.answers('n1');                       -- again (a cached answer)
SELECT try_acquire_leader('n1', '1 hour', 'b') AS b_gets_it;
SELECT pg_temp.other($$SELECT release_leader('n1', 'a')$$);
SELECT pg_temp.answers('n1');                       -- released: nobody
SELECT pg_temp.other($$SELECT try_acquire_leader('n1', '1 hour', 'b')$$);
SELECT pg_temp.answers('n1');                       -- b, term 2
-- A renewal keeps the answers; its new expiry is what the view shows.
SELECT pg_temp.other($$SELECT try_acquire_leader('n1', '2 hours', 'b')$$);
SELECT pg_temp.answers('n1'),
       (SELECT expires_at - renewed_at FROM leader_election.leases WHERE name = 'n1') AS ttl;

-- Rolled back, whole or to a savepoint: nothing changed.
SELECT pg_temp.other($$BEGIN; SELECT release_leader('n1', 'b'); ROLLBACK$$);
SELECT pg_temp.answers('n1');
SELECT pg_temp.other($$BEGIN; SAVEPOINT s; SELECT release_leader('n1', 'b');
                       ROLLBACK TO s; COMMIT$$);
SELECT pg_temp.answers('n1');
-- Released inside a savepoint that commits, then taken in the outer transaction.
SELECT pg_temp.other($$BEGIN; SAVEPOINT s; SELECT release_leader('n1', 'b');
                       RELEASE s; SELECT try_acquire_leader('n1', '1 hour', 'a');
                       COMMIT$$);
SELECT pg_temp.answers('n1');                       -- a, term 3
-- Released, then a takeover rolled back to a savepoint: nobody holds it.
SELECT pg_temp.other($$BEGIN; SELECT release_leader('n1', 'a'); SAVEPOINT s;
                       SELECT try_acquire_leader('n1', '1 hour', 'b');
                       ROLLBACK TO s; COMMIT$$);
SELECT pg_temp.answers('n1');                       -- released by a, nobody
-- An error in the other session's transaction leaves everything as it was.
SELECT pg_temp.other($$SELECT try_acquire_leader('n1', '1 hour', 'a')$$);
SELECT pg_temp.try($$SELECT pg_temp.other('SELECT release_leader(''n1'', ''a''), 1/0')$$)
    AS failed_release;
SELECT pg_temp.answers('n1');                       -- a, term 4

-- Expiry needs no change at all: the answer is computed at the call.
SELECT pg_temp.other($$SELECT try_acquire_leader('short', '100 ms', 'a')$$);
SELECT pg_temp.wait_until_expired('short');
SELECT pg_temp.answers('short');                    -- expired: nobody
SELECT pg_temp.other($$SELECT try_acquire_leader('short', '1 hour', 'b')$$);
SELECT pg_temp.answers('short');                    -- b, term 2

-- A name too long for the cache (64 bytes and more) is read from the table.
SELECT pg_temp.other(format($$SELECT try_acquire_leader(%L, '1 hour', 'a')$$, repeat('x', 70)));
SELECT pg_temp.answers(repeat('x', 70));
SELECT pg_temp.other(format($$SELECT release_leader(%L, 'a')$$, repeat('x', 70)));
SELECT pg_temp.answers(repeat('x', 70));
-- So is a holder that long.
SELECT pg_temp.other(format($$SELECT try_acquire_leader('longholder', '1 hour', %L)$$, repeat('h', 70)));
SELECT am_leader('longholder', repeat('h', 70)) AS long_holder_leads,
       leader_term('longholder', repeat('h', 70)) AS term;
SELECT pg_temp.other(format($$SELECT release_leader('longholder', %L)$$, repeat('h', 70)));
SELECT am_leader('longholder', repeat('h', 70)) AS long_holder_leads;

--
-- Names that share a cache slot (the cache hashes a name with the same
-- function as hashtext(), xor the database OID, modulo 4096 slots): each
-- change of one must leave the other's answers right.
--
SELECT n AS twin
  FROM generate_series(1, 100000) AS i, LATERAL (SELECT 'twin' || i AS n) AS t
 WHERE ((hashtext(n)::bigint & 4294967295) #
        (SELECT oid::bigint FROM pg_database WHERE datname = current_database())) % 4096 =
       ((hashtext('n1')::bigint & 4294967295) #
        (SELECT oid::bigint FROM pg_database WHERE datname = current_database())) % 4096
 ORDER BY i LIMIT 1 \gset
SELECT pg_temp.other(format($$SELECT try_acquire_leader(%L, '1 hour', 'b')$$, :'twin'));
SELECT pg_temp.answers('n1') AS n1, pg_temp.answers(:'twin') AS twin;
SELECT pg_temp.other($$SELECT release_leader('n1', 'a')$$);
SELECT pg_temp.answers('n1') AS n1, pg_temp.answers(:'twin') AS twin;
SELECT pg_temp.other(format($$BEGIN; SELECT release_leader(%L, 'b');
                              SELECT try_acquire_leader('n1', '1 hour', 'b'); COMMIT$$, :'twin'));
SELECT pg_temp.answers('n1') AS n1, pg_temp.answers(:'twin') AS twin;

--
-- Changes made around the functions, by a superuser: the triggers running
-- leases_cache_invalidate() make each of them visible at once.
--
SELECT pg_temp.other($$SELECT try_acquire_leader('su', '1 hour', 'a')$$);
SELECT pg_temp.answers('su');                       -- a, term 1
SELECT pg_temp.other($$UPDATE leader_election.leases SET holder = 'b' WHERE name = 'su'$$);
SELECT pg_temp.answers('su');                       -- b, term 1
SELECT pg_temp.other($$UPDATE leader_election.leases SET term = 7 WHERE name = 'su'$$);
SELECT pg_temp.answers('su');                       -- b, term 7
SELECT pg_temp.other($$DELETE FROM leader_election.leases WHERE name = 'su'$$);
SELECT pg_temp.answers('su');                       -- nobody
SELECT pg_temp.other($$INSERT INTO leader_election.leases (name, owner, holder, term, expires_at)
                       VALUES ('su', current_user::regrole, 'a', 9, now() + interval '1 hour')$$);
SELECT pg_temp.answers('su');                       -- a, term 9
-- Under session_replication_role = replica (the triggers fire ALWAYS).
SELECT pg_temp.other($$SET session_replication_role = replica$$);
SELECT pg_temp.other($$UPDATE leader_election.leases SET holder = 'b' WHERE name = 'su'$$);
SELECT pg_temp.other($$RESET session_replication_role$$);
SELECT pg_temp.answers('su');                       -- b, term 9
-- TRUNCATE, and COPY.
SELECT pg_temp.answers('n1') AS n1_before;
SELECT pg_temp.other($$TRUNCATE leader_election.leases$$);
SELECT pg_temp.answers('n1') AS n1, pg_temp.answers('su') AS su;
SELECT current_setting('data_directory') || '/lease_cache_test.copy' AS copy_file \gset
COPY (SELECT 'su', current_user, 'a', 10, now() + interval '1 hour') TO :'copy_file';
SELECT pg_temp.other(format($$COPY leader_election.leases (name, owner, holder, term, expires_at)
                              FROM %L$$, :'copy_file'));
SELECT pg_temp.answers('su');                       -- a, term 10
-- Such a change in a transaction that is then prepared is refused.
SELECT pg_temp.try($$SELECT pg_temp.other('BEGIN; DELETE FROM leader_election.leases;
                                            PREPARE TRANSACTION ''lease_cache_test''')$$)
    AS prepare_foreign_change;
SELECT pg_temp.other('ROLLBACK');
-- (Were it prepared, it would hold its locks: roll it back, after showing it.)
SELECT count(*) > 0 AS prepared FROM pg_prepared_xacts WHERE gid = 'lease_cache_test' \gset
SELECT :'prepared' AS was_prepared;
\if :prepared
ROLLBACK PREPARED 'lease_cache_test';
\endif
SELECT pg_temp.answers('su');                       -- still a, term 10
-- This session's own uncommitted change is seen by its own answers.
BEGIN;
UPDATE leader_election.leases SET holder = 'b' WHERE name = 'su';
SELECT pg_temp.answers('su');                       -- b here
ROLLBACK;
SELECT pg_temp.answers('su');                       -- a again

-- With a trigger disabled a backend stops using the cache, so even
-- changes the triggers do not see are seen; enabling it again empties the
-- cache, which may hold rows from before such a change.
SELECT pg_temp.answers('su');                       -- a, term 10
ALTER TABLE leader_election.leases DISABLE TRIGGER leases_cache_invalidate_rows;
SELECT pg_temp.other($$UPDATE leader_election.leases SET holder = 'b' WHERE name = 'su'$$);
SELECT pg_temp.answers('su');                       -- b
ALTER TABLE leader_election.leases ENABLE ALWAYS TRIGGER leases_cache_invalidate_rows;
SELECT pg_temp.answers('su');                       -- b
SELECT pg_temp.other($$SELECT release_leader('su', 'b')$$);
SELECT pg_temp.answers('su');                       -- nobody
-- A plain ENABLE (as pg_restore --disable-triggers leaves it) does not fire
-- under session_replication_role = replica: the cache stays off.
ALTER TABLE leader_election.leases ENABLE TRIGGER leases_cache_invalidate_rows;
SELECT pg_temp.other($$SET session_replication_role = replica$$);
SELECT pg_temp.other($$UPDATE leader_election.leases
                          SET holder = 'a', expires_at = now() + interval '1 hour'
                        WHERE name = 'su'$$);
SELECT pg_temp.other($$RESET session_replication_role$$);
SELECT pg_temp.answers('su');                       -- a, term 10
ALTER TABLE leader_election.leases ENABLE ALWAYS TRIGGER leases_cache_invalidate_rows;

-- A name claimed without a lease (register_task reserves it for its role:
-- a row with no holder and term 0) after an answer cached that there was
-- no row: the claim reaches the cache, so another role is refused (42501)
-- and the next try takes the reserved row over, instead of both inserting
-- a second row (23505).
CREATE ROLE regress_le_cache_tasker LOGIN;
CREATE ROLE regress_le_cache_other;
CREATE PROCEDURE public.regress_le_cache_noop() LANGUAGE sql AS 'SELECT 1';
ALTER PROCEDURE public.regress_le_cache_noop() OWNER TO regress_le_cache_tasker;
GRANT EXECUTE ON FUNCTION leader_election.register_task(text, regprocedure, interval, interval),
      leader_election.unregister_task(text) TO regress_le_cache_tasker;
GRANT EXECUTE ON FUNCTION try_acquire_leader(text, interval, text) TO regress_le_cache_other;
SELECT pg_temp.other($$SELECT am_leader('claimed', 'a')$$) AS cached_no_row;
SELECT pg_temp.other($$SET ROLE regress_le_cache_tasker$$);
SELECT pg_temp.other($$SELECT leader_election.register_task('claimed',
    'public.regress_le_cache_noop()', '1 minute', '1 minute') > 0$$) AS registered;
SELECT pg_temp.other($$RESET ROLE$$);
SET ROLE regress_le_cache_other;
SELECT pg_temp.try($$SELECT try_acquire_leader('claimed', '1 minute', 'x')$$) AS other_role;
RESET ROLE;
SELECT try_acquire_leader('claimed', '1 minute', 'a') AS acquired;
SELECT holder, owner::regrole, term > 0 AS new_term
  FROM leader_election.leases WHERE name = 'claimed';
SELECT pg_temp.other($$SET ROLE regress_le_cache_tasker$$);
SELECT pg_temp.other($$SELECT leader_election.unregister_task('claimed')$$) AS unregistered;
SELECT pg_temp.other($$RESET ROLE$$);
DELETE FROM leader_election.leases WHERE name = 'claimed';
DROP PROCEDURE public.regress_le_cache_noop();
REVOKE ALL ON FUNCTION leader_election.register_task(text, regprocedure, interval, interval),
      leader_election.unregister_task(text) FROM regress_le_cache_tasker;
REVOKE ALL ON FUNCTION try_acquire_leader(text, interval, text) FROM regress_le_cache_other;
DROP ROLE regress_le_cache_tasker, regress_le_cache_other;

-- A trigger on another of the extension's tables that writes the leases
-- table (here: the history's, rewriting the holder of each new term) runs
-- inside the extension's own statement; while there is one, answers read
-- the table, which shows what the trigger wrote.
CREATE FUNCTION public.regress_le_rewrite_holder() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE leader_election.leases SET holder = 'rewritten' WHERE name = NEW.name;
    RETURN NULL;
END $$;
CREATE TRIGGER regress_le_rewrite_holder AFTER INSERT ON leader_election.history
    FOR EACH ROW EXECUTE FUNCTION public.regress_le_rewrite_holder();
SELECT pg_temp.other($$SELECT try_acquire_leader('trg', '1 hour', 'a')$$);
SELECT holder FROM leader_election.leases WHERE name = 'trg';
SELECT pg_temp.answers('trg');                      -- nobody: held by 'rewritten'
DROP TRIGGER regress_le_rewrite_holder ON leader_election.history;
DROP FUNCTION public.regress_le_rewrite_holder();
SELECT pg_temp.answers('trg');                      -- nobody: held by 'rewritten'
DELETE FROM leader_election.leases WHERE name = 'trg';

SELECT dblink_disconnect('other');
DROP EXTENSION dblink;
